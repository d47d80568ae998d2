//! The distributed store: an etcd v3 cluster (cargo feature `etcd`).
//!
//! Layout (ARCHITECTURE.md section 4): each object is one key, `<prefix>/<group>/<kind>/<namespace>/<name>`
//! (an empty segment for the core group and for cluster-scoped objects, so a core ConfigMap is
//! `/driftless//ConfigMap/default/app`), whose value is the object as JSON. The store revision
//! is etcd's cluster revision, and an object's `metadata.resourceVersion` is its key's
//! `mod_revision`, set when it is read, as the Kubernetes API server does with its own etcd
//! storage (`k8s.io/apiserver/pkg/storage/etcd3`): the stored JSON carries none.
//!
//! - **Compare-and-swap.** A commit reads the current values of its keys, checks the
//!   preconditions, then writes in one etcd transaction that compares every key's
//!   `mod_revision` (or `create_revision == 0` for an absent key) with what it read. When another
//!   writer got in between, it reads again and re-checks; a precondition that no longer holds is
//!   [`Error::Conflict`].
//! - **Transaction size.** etcd refuses a transaction with more than `--max-txn-ops` operations
//!   (128 by default, compares included) or a request above `--max-request-bytes` (1.5 MiB by
//!   default), so a commit goes in chunks of at most [`Options::max_txn_ops`] writes (one less
//!   when fenced) and [`Options::max_txn_bytes`] bytes of values, in order; a commit with one
//!   value above that is refused before anything is written. Each chunk is atomic; the chunks of one commit are not: when a
//!   later chunk fails, the earlier ones stay written and the error says so. A sync puts its
//!   inventory last, so it lands only with the last chunk; the sync that follows converges.
//! - **Change feed.** etcd's native watch on `<prefix>/`, from the revision after the one asked
//!   for. When that history has been compacted, the feed sends [`WatchItem::Relist`] at the
//!   current revision and watches on from there.
//! - **Fencing.** A handle made with [`EtcdStore::fenced`] adds to every write transaction the
//!   condition that the app's lease key (see [`Replicas`]) is still the one this replica
//!   created, so a replica that lost an app's lease (a pause, a partition) can never write for
//!   it, even before it notices.
//!
//! Replica coordination lives under the prefix, beside the objects but never read as one (its
//! keys have fewer segments): `<prefix>/_leases/<app>` holds the name of the replica
//! reconciling `app`, attached to that replica's etcd lease, and `<prefix>/_replicas/<replica>`
//! says a replica is alive and which apps it runs. See [`Replicas`].

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, Identity,
    KeyValue, PutOptions, TlsOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

use super::{
    Committed, Error, Event, Fence, Listing, Result, Selector, Store, Stored, Watch, WatchItem,
    Write, check_distinct, stamp_of, stamp_record,
};
use crate::object::{Object, ObjectKey};
use crate::replicas::{Holder, PassMemory, plan_pass};

/// How to reach an etcd cluster and lay the store out in it.
#[derive(Clone, Debug)]
pub struct Options {
    /// Client URLs, e.g. `http://127.0.0.1:2379` (`https://` with [`Options::tls`]).
    pub endpoints: Vec<String>,
    /// Key prefix without a trailing `/`, e.g. `/driftless`.
    pub prefix: String,
    /// etcd user name and password (etcd's own authentication), when the cluster has it on.
    pub user: Option<(String, SecretString)>,
    /// TLS to the cluster.
    pub tls: Option<Tls>,
    /// How long to wait for a connection (default 5 s).
    pub dial_timeout: Duration,
    /// How long one request may take before it counts as failed (default 10 s).
    pub request_timeout: Duration,
    /// Most writes in one transaction (default 128, etcd's default `--max-txn-ops`).
    pub max_txn_ops: usize,
    /// Most bytes of keys and values in one transaction (default 1,400,000, under etcd's
    /// default `--max-request-bytes` of 1.5 MiB = 1,572,864). A commit with one object larger
    /// than this is refused before anything is written.
    pub max_txn_bytes: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            endpoints: vec!["http://127.0.0.1:2379".into()],
            prefix: "/driftless".into(),
            user: None,
            tls: None,
            dial_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            max_txn_ops: 128,
            max_txn_bytes: 1_400_000,
        }
    }
}

/// The largest reply the client accepts, in bytes (256 MiB).
const MAX_REPLY_BYTES: usize = 256 << 20;

/// How long the change feed waits after a burst of events before it asks etcd for a progress
/// notification (a bookmark at the store's revision).
const PROGRESS_SETTLE: std::time::Duration = std::time::Duration::from_millis(2);

/// How often the change feed asks etcd for a progress notification besides: writes outside the
/// prefix move the store's revision without an event here.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// Keys per page of a listing: with etcd's default 1.5 MiB request limit per value, a page
/// stays well under [`MAX_REPLY_BYTES`] in practice.
const LIST_PAGE: i64 = 250;

/// TLS settings, as PEM bytes read from the configured files.
#[derive(Clone)]
pub struct Tls {
    /// CA certificates that sign the servers' certificates (the system roots are not used).
    pub ca: Option<Vec<u8>>,
    /// A client certificate and its private key, for clusters that check clients.
    pub identity: Option<(Vec<u8>, SecretString)>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("ca", &self.ca.as_ref().map(|c| c.len()))
            .field("identity", &self.identity.as_ref().map(|_| "[redacted]"))
            .finish()
    }
}

/// A store in an etcd cluster. Cloning gives another handle on the same connection.
#[derive(Clone)]
pub struct EtcdStore {
    client: Client,
    opts: Arc<Options>,
    /// With [`EtcdStore::fenced`]: the app's current fence (`None` while not held).
    fence: Option<watch::Receiver<Option<Fence>>>,
}

fn backend<E: std::error::Error + Send + Sync + 'static>(
    op: &'static str,
) -> impl FnOnce(E) -> Error {
    move |e| Error::Backend {
        op,
        source: Box::new(e),
    }
}

/// An error of the etcd client, naming the cluster it came from.
#[derive(Debug, thiserror::Error)]
#[error("etcd at {endpoints}")]
struct EtcdError {
    endpoints: String,
    #[source]
    source: etcd_client::Error,
}

/// An error and its sources, joined with `: ` (for logs).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

fn failed(op: &'static str, message: String) -> Error {
    Error::Backend {
        op,
        source: message.into(),
    }
}

impl EtcdStore {
    /// Connects to the cluster. The connection is made lazily and again after a failure, so
    /// this succeeds while etcd is down; requests fail until it is back.
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] for an invalid endpoint URL, an empty endpoint list or prefix, or
    /// unusable TLS material.
    pub async fn connect(opts: Options) -> Result<Self> {
        if opts.endpoints.is_empty() {
            return Err(failed("open", "no etcd endpoints".into()));
        }
        if opts.prefix.is_empty() || opts.prefix.ends_with('/') {
            return Err(failed(
                "open",
                format!(
                    "the key prefix `{}` must be non-empty and not end with `/`",
                    opts.prefix
                ),
            ));
        }
        let mut connect = ConnectOptions::new()
            .with_connect_timeout(opts.dial_timeout)
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
            .with_keep_alive_while_idle(true);
        if let Some((user, password)) = &opts.user {
            connect = connect.with_user(user.clone(), password.expose_secret().to_string());
        }
        if let Some(tls) = &opts.tls {
            let mut t = TlsOptions::new();
            if let Some(ca) = &tls.ca {
                t = t.ca_certificate(Certificate::from_pem(ca));
            }
            if let Some((cert, key)) = &tls.identity {
                t = t.identity(Identity::from_pem(cert, key.expose_secret().as_bytes()));
            }
            connect = connect.with_tls(t);
        }
        // With a user, connecting authenticates, which needs the cluster: retry in the
        // background of each request instead of failing the start.
        let endpoints = opts.endpoints.clone();
        let client = tokio::time::timeout(
            opts.dial_timeout + opts.request_timeout,
            Client::connect(endpoints, Some(connect)),
        )
        .await
        .map_err(|_| {
            failed(
                "open",
                format!(
                    "no answer from etcd at {} within {:?}",
                    opts.endpoints.join(", "),
                    opts.dial_timeout + opts.request_timeout
                ),
            )
        })?
        .map_err(backend("open"))?;
        Ok(Self {
            client,
            opts: Arc::new(opts),
            fence: None,
        })
    }

    /// The options this store was opened with.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// A handle whose every write also requires `fence` to hold (see the module
    /// documentation). While `fence` is `None` its writes fail with [`Error::Backend`]: this
    /// replica does not hold the app.
    pub fn fenced(&self, fence: watch::Receiver<Option<Fence>>) -> Self {
        Self {
            fence: Some(fence),
            ..self.clone()
        }
    }

    /// Compacts etcd's history up to `revision` (physically, waiting until done): a watch from
    /// an older revision then gets [`WatchItem::Relist`]. For maintenance and tests; etcd
    /// compacts by itself when started with `--auto-compaction-retention`.
    ///
    /// # Errors
    ///
    /// [`Error::Backend`].
    pub async fn compact(&self, revision: u64) -> Result<()> {
        let mut kv = self.kv();
        self.timed(
            "compact",
            kv.compact(
                revision as i64,
                Some(etcd_client::CompactionOptions::new().with_physical()),
            ),
        )
        .await?;
        Ok(())
    }

    /// The etcd key of an object: `<prefix>/<group>/<kind>/<namespace>/<name>`.
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] when the group, kind, namespace or name contains `/` (Kubernetes allows
    /// none there), which would make the key ambiguous.
    pub fn key_of(&self, key: &ObjectKey) -> Result<String> {
        encode_key(&self.opts.prefix, key)
    }

    /// A KV client that takes replies up to [`MAX_REPLY_BYTES`] (tonic's default is 4 MiB,
    /// less than a page of large objects or a burst of watch events).
    fn kv(&self) -> etcd_client::KvClient {
        self.client
            .kv_client()
            .max_decoding_message_size(MAX_REPLY_BYTES)
    }

    /// A watch client that takes replies up to [`MAX_REPLY_BYTES`]: etcd sends a backlog of
    /// events in one reply.
    fn watcher(&self) -> etcd_client::WatchClient {
        self.client
            .watch_client()
            .max_decoding_message_size(MAX_REPLY_BYTES)
    }

    /// Where the parts of a split value live: `<prefix>/_parts/<digest>/` (never read as
    /// objects: too few segments).
    fn parts_prefix(&self, digest: &str) -> String {
        format!("{}/_parts/{digest}/", self.opts.prefix)
    }

    /// The object in a key-value pair, its parts read back when it was split (at `revision`
    /// when not 0), with `resourceVersion` = the key's `mod_revision`.
    ///
    /// # Errors
    ///
    /// [`Error::Corrupt`] when the value or its parts do not make an object.
    async fn decode_full(&self, key: &ObjectKey, kvp: &KeyValue, revision: i64) -> Result<Object> {
        let body = self.full_text(key, kvp, revision).await?;
        let mut o = super::decode(key, &body)?;
        o.metadata_mut().insert(
            "resourceVersion".into(),
            Value::String(kvp.mod_revision().to_string()),
        );
        Ok(o)
    }

    /// The whole stored text of a value, its parts joined when it is split (read at
    /// `revision`, 0: the latest).
    async fn full_text<'a>(
        &self,
        key: &ObjectKey,
        kvp: &'a KeyValue,
        revision: i64,
    ) -> Result<std::borrow::Cow<'a, str>> {
        let corrupt = |e: Box<dyn std::error::Error + Send + Sync>| Error::Corrupt {
            key: key.clone(),
            source: e,
        };
        Ok(match parts_of(kvp.value()) {
            None => std::borrow::Cow::Borrowed(
                std::str::from_utf8(kvp.value()).map_err(|e| corrupt(Box::new(e)))?,
            ),
            Some(p) => {
                let mut kv = self.kv();
                let mut o = GetOptions::new().with_prefix();
                if revision > 0 {
                    o = o.with_revision(revision);
                }
                let resp = self
                    .timed("get", kv.get(self.parts_prefix(&p.digest), Some(o)))
                    .await?;
                let mut whole = Vec::with_capacity(p.bytes);
                for part in resp.kvs() {
                    whole.extend_from_slice(part.value());
                }
                if resp.kvs().len() != p.parts || whole.len() != p.bytes {
                    return Err(corrupt(
                        format!(
                            "its value is split into {} parts of {} bytes, but {} parts of {} bytes are stored",
                            p.parts,
                            p.bytes,
                            resp.kvs().len(),
                            whole.len()
                        )
                        .into(),
                    ));
                }
                std::borrow::Cow::Owned(String::from_utf8(whole).map_err(|e| corrupt(Box::new(e)))?)
            }
        })
    }

    /// Removes the parts of split values that a commit replaced or deleted (best effort: a
    /// part left behind is only space).
    async fn drop_parts(&self, digests: Vec<String>) {
        let mut kv = self.kv();
        for d in digests {
            let r = self
                .timed(
                    "commit",
                    kv.delete(
                        self.parts_prefix(&d),
                        Some(etcd_client::DeleteOptions::new().with_prefix()),
                    ),
                )
                .await;
            if let Err(e) = r {
                tracing::debug!(digest = %d, error = %chain(&e), "Parts of a replaced value not removed");
            }
        }
    }

    /// An etcd client error as a store error naming the cluster.
    fn etcd_err(&self, op: &'static str, source: etcd_client::Error) -> Error {
        Error::Backend {
            op,
            source: Box::new(EtcdError {
                endpoints: self.opts.endpoints.join(", "),
                source,
            }),
        }
    }

    async fn timed<T, F>(&self, op: &'static str, f: F) -> Result<T>
    where
        F: std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        match tokio::time::timeout(self.opts.request_timeout, f).await {
            Ok(r) => r.map_err(|e| self.etcd_err(op, e)),
            Err(_) => Err(failed(
                op,
                format!(
                    "etcd at {} did not answer within {:?}",
                    self.opts.endpoints.join(", "),
                    self.opts.request_timeout
                ),
            )),
        }
    }

    /// Reads `keys` (etcd keys) in transactions of at most `max_txn_ops` reads, all at one
    /// revision: the first chunk's. Returns the revision and what exists.
    async fn read_keys(&self, op: &'static str, keys: &[String]) -> Result<(i64, Vec<KeyValue>)> {
        self.read_keys_with(op, keys, false).await
    }

    /// [`Self::read_keys`], without the values when `keys_only`.
    async fn read_keys_with(
        &self,
        op: &'static str,
        keys: &[String],
        keys_only: bool,
    ) -> Result<(i64, Vec<KeyValue>)> {
        let mut kv = self.kv();
        let mut revision = 0i64;
        let mut found = Vec::new();
        for chunk in keys.chunks(self.opts.max_txn_ops.max(1)) {
            let ops: Vec<TxnOp> = chunk
                .iter()
                .map(|k| {
                    let o = GetOptions::new();
                    let o = if keys_only { o.with_keys_only() } else { o };
                    let o = if revision > 0 {
                        o.with_revision(revision)
                    } else {
                        o
                    };
                    TxnOp::get(k.as_bytes().to_vec(), Some(o))
                })
                .collect();
            let resp = self.timed(op, kv.txn(Txn::new().and_then(ops))).await?;
            if revision == 0 {
                revision = resp.header().map(|h| h.revision()).unwrap_or(0);
            }
            for r in resp.op_responses() {
                if let TxnOpResponse::Get(mut g) = r {
                    found.extend(g.take_kvs());
                }
            }
        }
        if revision == 0 {
            revision = self.current_revision(op).await?;
        }
        Ok((revision, found))
    }

    async fn current_revision(&self, op: &'static str) -> Result<i64> {
        let mut kv = self.kv();
        let resp = self
            .timed(
                op,
                kv.get(
                    format!("{}/", self.opts.prefix),
                    Some(GetOptions::new().with_count_only()),
                ),
            )
            .await?;
        Ok(resp.header().map(|h| h.revision()).unwrap_or(0))
    }

    /// Commits one chunk: read, check, write with compares; again when another writer got in
    /// between.
    async fn commit_chunk(&self, writes: &[Write]) -> Result<Committed> {
        let keys: Vec<String> = writes
            .iter()
            .map(|w| self.key_of(&w.key()))
            .collect::<Result<_>>()?;
        let fence = self.fence.as_ref().map(|f| f.borrow().clone());
        let fence = match fence {
            None => None,
            Some(Some(f)) => Some(f),
            Some(None) => {
                return Err(failed(
                    "commit",
                    "this replica does not hold the app's lease".into(),
                ));
            }
        };
        let mut kv = self.kv();
        for _attempt in 0..16 {
            let (_, found) = self.read_keys("commit", &keys).await?;
            let mut current: HashMap<&[u8], &KeyValue> = HashMap::new();
            for kvp in &found {
                current.insert(kvp.key(), kvp);
            }
            let mut compares = Vec::new();
            let mut ops = Vec::new();
            let mut stored = Vec::new();
            // Digests of split values this commit replaces or deletes, and the parts it writes.
            let mut replaced: Vec<String> = Vec::new();
            let mut new_parts: Vec<(String, Vec<String>)> = Vec::new();
            for (w, k) in writes.iter().zip(&keys) {
                let old_kv = current.get(k.as_bytes()).copied();
                // A delete needs only the version (the mod revision), so that it can remove a
                // record whose value is not a valid object; a put merges with the old object;
                // a record's put needs only the old record's metadata (records are megabytes).
                let key = w.key();
                let old_version = old_kv.map(|kvp| kvp.mod_revision() as u64);
                let old = match (old_kv, w) {
                    (Some(kvp), Write::Put { .. }) if !key.is_reserved() => {
                        Some(self.decode_full(&key, kvp, 0).await?)
                    }
                    _ => None,
                };
                let old_record_meta = match (old_kv, w) {
                    (Some(kvp), Write::Put { .. } | Write::PutRecord { .. })
                        if key.is_reserved() =>
                    {
                        super::record_meta_of(&self.full_text(&key, kvp, 0).await?)
                    }
                    _ => None,
                };
                if let Some(p) = old_kv.and_then(|kvp| parts_of(kvp.value())) {
                    replaced.push(p.digest);
                }
                compares.push(match old_kv {
                    Some(kvp) => {
                        Compare::mod_revision(k.as_bytes(), CompareOp::Equal, kvp.mod_revision())
                    }
                    None => Compare::create_revision(k.as_bytes(), CompareOp::Equal, 0),
                });
                let put = match w {
                    Write::PutRecord {
                        record,
                        precondition,
                    } => {
                        precondition.check_version(&key, old_version)?;
                        let mut head = stamp_record(old_record_meta, record.head(), 0);
                        head.metadata_mut().remove("resourceVersion");
                        let json = record.text(&head);
                        Some((Stored::from(head), json))
                    }
                    Write::Put {
                        object,
                        precondition,
                        json: made,
                    } => {
                        if key.is_reserved() {
                            precondition.check_version(&key, old_version)?;
                            let mut new = stamp_record(old_record_meta, object.clone(), 0);
                            new.metadata_mut().remove("resourceVersion");
                            let json = new.to_json();
                            Some((Stored::from(new), json))
                        } else {
                            precondition.check(&key, old.as_ref())?;
                            // Written from the object in place (no stamped copy); the
                            // resourceVersion is the transaction's, known once it commits.
                            let stamp = stamp_of(old.as_ref(), object, None);
                            let json = match made {
                                Some(made) => stamp.text_from(object, made),
                                None => stamp.text(object),
                            };
                            Some((Stored::stamped(object.clone(), stamp), json))
                        }
                    }
                    Write::Delete { precondition, .. } => {
                        precondition.check_version(&key, old_version)?;
                        if old_kv.is_some() {
                            ops.push(TxnOp::delete(k.as_bytes(), None));
                        }
                        None
                    }
                };
                if let Some((new, json)) = put {
                    match split_value(k, &json) {
                        None => ops.push(TxnOp::put(k.as_bytes(), json, None)),
                        Some((marker, value, parts)) => {
                            replaced.retain(|d| *d != marker.digest);
                            new_parts.push((marker.digest, parts));
                            ops.push(TxnOp::put(k.as_bytes(), value, None));
                        }
                    }
                    stored.push(new);
                }
            }
            if ops.is_empty() {
                return Ok(Committed::default());
            }
            if let Some(f) = &fence {
                compares.push(Compare::create_revision(
                    f.key.as_bytes(),
                    CompareOp::Equal,
                    f.created,
                ));
            }
            // Parts first, each its own request: content-addressed, so writing them again on a
            // retry is harmless, and the key points at them only once the transaction commits.
            for (digest, parts) in &new_parts {
                for (i, part) in parts.iter().enumerate() {
                    self.timed(
                        "commit",
                        kv.put(
                            format!("{}{i:06}", self.parts_prefix(digest)),
                            part.as_str(),
                            None,
                        ),
                    )
                    .await?;
                }
            }
            let resp = self
                .timed("commit", kv.txn(Txn::new().when(compares).and_then(ops)))
                .await?;
            if resp.succeeded() {
                self.drop_parts(replaced).await;
                let revision = resp.header().map(|h| h.revision()).unwrap_or(0) as u64;
                for o in &mut stored {
                    o.set_resource_version(revision);
                }
                return Ok(Committed { revision, stored });
            }
            if let Some(f) = &fence {
                let held = self
                    .timed("commit", kv.get(f.key.as_bytes(), None))
                    .await?
                    .kvs()
                    .first()
                    .map(|kvp| kvp.create_revision());
                if held != Some(f.created) {
                    return Err(failed(
                        "commit",
                        format!("this replica lost the lease {} (taken over)", f.key),
                    ));
                }
            }
            // Another writer changed one of the keys since the read: read again and re-check.
        }
        Err(failed(
            "commit",
            "other writers kept changing these objects during 16 attempts".into(),
        ))
    }

    /// Splits writes into chunks within the transaction limits: at most `max_txn_ops` writes
    /// (one less when fenced: the fence is one more compare, and etcd counts compares against
    /// the same limit) and `max_txn_bytes` of values (a value split into parts counts as its
    /// marker).
    fn chunks(&self, writes: Vec<Write>) -> Vec<Vec<Write>> {
        let starts = self.chunk_starts(&writes);
        let mut out = Vec::with_capacity(starts.len());
        let mut rest = writes;
        for start in starts.into_iter().skip(1).rev() {
            out.push(rest.split_off(start));
        }
        if !rest.is_empty() {
            out.push(rest);
        }
        out.reverse();
        out
    }

    /// Where each chunk of [`Self::chunks`] starts (index into `writes`; the first is 0).
    fn chunk_starts(&self, writes: &[Write]) -> Vec<usize> {
        let max_ops = self
            .opts
            .max_txn_ops
            .saturating_sub(usize::from(self.fence.is_some()))
            .max(1);
        let mut starts = Vec::new();
        let mut len = 0usize;
        let mut bytes = 0usize;
        for (i, w) in writes.iter().enumerate() {
            // A value above PART_BYTES goes in parts of its own; the transaction carries its
            // marker.
            let size = match w {
                // Sized before the store's metadata is laid over it (a few hundred bytes at
                // most: a record's head, an object's generation and creationTimestamp): one
                // that may go either side of PART_BYTES is counted whole, since it may stay
                // inline.
                Write::Put { object, .. } => stored_size(object.json_len()),
                Write::PutRecord { record, .. } => stored_size(record.len()),
                Write::Delete { .. } => 64,
            } + self.opts.prefix.len();
            if i == 0 || len >= max_ops || bytes + size > self.opts.max_txn_bytes {
                starts.push(i);
                len = 0;
                bytes = 0;
            }
            bytes += size;
            len += 1;
        }
        starts
    }

    /// Lists every object under `start` (an etcd key prefix), paginated at one revision.
    async fn list_prefix(&self, start: String, selector: &Selector) -> Result<Listing> {
        let mut kv = self.kv();
        let end = prefix_end(start.as_bytes());
        let mut from = start.into_bytes();
        let mut revision = 0i64;
        let mut objects = BTreeMap::new();
        let mut unreadable = BTreeMap::new();
        loop {
            let mut o = GetOptions::new()
                .with_range(end.clone())
                .with_limit(LIST_PAGE);
            if revision > 0 {
                o = o.with_revision(revision);
            }
            let resp = self.timed("list", kv.get(from.clone(), Some(o))).await?;
            if revision == 0 {
                revision = resp.header().map(|h| h.revision()).unwrap_or(0);
            }
            for kvp in resp.kvs() {
                let Some(key) = decode_key(&self.opts.prefix, kvp.key()) else {
                    continue;
                };
                if selector.matches(&key) {
                    match self.decode_full(&key, kvp, revision).await {
                        Ok(o) => {
                            objects.insert(key, o);
                        }
                        Err(e @ Error::Corrupt { .. }) => {
                            unreadable.insert(key, super::error_chain(&e));
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            match resp.kvs().last() {
                Some(last) if resp.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => break,
            }
        }
        Ok(Listing {
            revision: revision as u64,
            objects,
            unreadable,
        })
    }
}

/// The key just after every key that starts with `prefix` (etcd's range end for a prefix).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// `<prefix>/<group>/<kind>/<namespace>/<name>`.
fn encode_key(prefix: &str, key: &ObjectKey) -> Result<String> {
    for (what, segment) in [
        ("group", &key.group()),
        ("kind", &key.kind()),
        ("namespace", &key.namespace()),
        ("name", &key.name()),
    ] {
        if segment.contains('/') {
            return Err(failed(
                "key",
                format!("the {what} of {key} contains `/`, which an etcd key cannot carry here"),
            ));
        }
    }
    Ok(format!(
        "{prefix}/{}/{}/{}/{}",
        key.group(),
        key.kind(),
        key.namespace(),
        key.name()
    ))
}

/// The object key of an etcd key under `prefix`, or `None` for keys of another layout.
fn decode_key(prefix: &str, raw: &[u8]) -> Option<ObjectKey> {
    let s = std::str::from_utf8(raw).ok()?;
    let rest = s.strip_prefix(prefix)?.strip_prefix('/')?;
    // Exactly four segments: names never contain `/` (Kubernetes' path-segment rule), so a key
    // of another install whose prefix starts with ours (`/a` and `/a/b`) is never read as ours.
    let mut parts = rest.split('/');
    let (group, kind, namespace, name) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || kind.is_empty() || name.is_empty() {
        return None;
    }
    Some(ObjectKey::new(group, kind, namespace, name))
}

/// The top-level key of the value stored in place of a value split into parts.
const PARTS_MARKER: &str = "driftless.io/parts";

/// Where a split value is written: at most this many bytes per part (1 MiB), each part its own
/// key and request, under etcd's default 1.5 MiB request limit.
const PART_BYTES: usize = 1 << 20;

/// Bytes a value of about `n` bytes (before the store's metadata is laid over it, which adds
/// or takes away at most [`STAMP_SLACK`]) takes in a transaction: its marker when it is sure
/// to be split into parts (above [`PART_BYTES`] either way), else all of it and the slack.
fn stored_size(n: usize) -> usize {
    if n > PART_BYTES + STAMP_SLACK {
        256
    } else {
        n + STAMP_SLACK
    }
}

/// What a store's metadata (and a record's head) adds to a value, at most, in bytes.
const STAMP_SLACK: usize = 512;

/// A value split into parts: the marker stored at the object's key.
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
struct Parts {
    /// Hex SHA-256 of the key and the whole value: parts are content-addressed and immutable.
    digest: String,
    /// How many parts.
    parts: usize,
    /// The whole value's length in bytes.
    bytes: usize,
}

/// The parts marker in a stored value, if it is one.
fn parts_of(value: &[u8]) -> Option<Parts> {
    let prefix = format!("{{\"{PARTS_MARKER}\":");
    if !value.starts_with(prefix.as_bytes()) {
        return None;
    }
    let v: BTreeMap<String, Parts> = serde_json::from_slice(value).ok()?;
    v.get(PARTS_MARKER).cloned()
}

/// Splits `json` (the value for `key`) into parts when it is larger than [`PART_BYTES`]:
/// the marker to store at the key and the parts, at UTF-8 character boundaries.
fn split_value(key: &str, json: &str) -> Option<(Parts, String, Vec<String>)> {
    if json.len() <= PART_BYTES {
        return None;
    }
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    h.update(key.as_bytes());
    h.update([0]);
    h.update(json.as_bytes());
    let digest: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let mut parts = Vec::new();
    let mut rest = json;
    while !rest.is_empty() {
        let mut cut = rest.len().min(PART_BYTES);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        parts.push(rest[..cut].to_string());
        rest = &rest[cut..];
    }
    let marker = Parts {
        digest,
        parts: parts.len(),
        bytes: json.len(),
    };
    let value = serde_json::json!({ PARTS_MARKER: marker }).to_string();
    Some((marker, value, parts))
}

#[async_trait]
impl Store for EtcdStore {
    async fn get(&self, key: &ObjectKey) -> Result<Option<Object>> {
        let k = self.key_of(key)?;
        let mut kv = self.kv();
        let resp = self.timed("get", kv.get(k, None)).await?;
        let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
        match resp.kvs().first() {
            Some(kvp) => Ok(Some(self.decode_full(key, kvp, revision).await?)),
            None => Ok(None),
        }
    }

    async fn version_of(&self, key: &ObjectKey) -> Result<Option<u64>> {
        let k = self.key_of(key)?;
        let mut kv = self.kv();
        let resp = self
            .timed(
                "version_of",
                kv.get(k, Some(GetOptions::new().with_keys_only())),
            )
            .await?;
        Ok(resp.kvs().first().map(|kvp| kvp.mod_revision() as u64))
    }

    async fn versions(&self, keys: &[&ObjectKey]) -> Result<Vec<super::Version>> {
        let raw: Vec<String> = keys.iter().map(|k| self.key_of(k)).collect::<Result<_>>()?;
        let (_, found) = self.read_keys_with("versions", &raw, true).await?;
        let found: std::collections::HashMap<&[u8], u64> = found
            .iter()
            .map(|kvp| (kvp.key(), kvp.mod_revision() as u64))
            .collect();
        Ok(raw
            .iter()
            .map(|k| super::Version::from_lookup(found.get(k.as_bytes()).copied()))
            .collect())
    }

    async fn get_many(&self, keys: &[ObjectKey]) -> Result<Listing> {
        let raw: Vec<String> = keys.iter().map(|k| self.key_of(k)).collect::<Result<_>>()?;
        let (revision, found) = self.read_keys("get_many", &raw).await?;
        let mut objects = BTreeMap::new();
        for kvp in &found {
            if let Some(key) = decode_key(&self.opts.prefix, kvp.key()) {
                let o = self.decode_full(&key, kvp, revision).await?;
                objects.insert(key, o);
            }
        }
        Ok(Listing {
            revision: revision as u64,
            objects,
            unreadable: BTreeMap::new(),
        })
    }

    async fn list(&self, selector: &Selector) -> Result<Listing> {
        // Narrow the range by the leading segments the selector fixes.
        let mut start = format!("{}/", self.opts.prefix);
        if let Some(g) = &selector.group
            && !g.contains('/')
        {
            start.push_str(g);
            start.push('/');
            if let Some(k) = &selector.kind
                && !k.contains('/')
            {
                start.push_str(k);
                start.push('/');
                if let Some(n) = &selector.namespace
                    && !n.contains('/')
                {
                    start.push_str(n);
                    start.push('/');
                }
            }
        }
        self.list_prefix(start, selector).await
    }

    fn commits_atomically(&self, writes: &[Write]) -> bool {
        self.chunk_starts(writes).len() <= 1
    }

    async fn commit(&self, writes: Vec<Write>) -> Result<Committed> {
        if writes.is_empty() {
            return Ok(Committed::default());
        }
        check_distinct(&writes)?;
        let chunks = self.chunks(writes);
        let total = chunks.len();
        let mut out = Committed::default();
        for (i, chunk) in chunks.into_iter().enumerate() {
            match self.commit_chunk(&chunk).await {
                Ok(c) => {
                    if c.revision > 0 {
                        out.revision = c.revision;
                    }
                    out.stored.extend(c.stored);
                }
                Err(e) if i > 0 => {
                    tracing::warn!(
                        written = i,
                        of = total,
                        "A commit larger than one etcd transaction failed part way; the earlier transactions stay written"
                    );
                    return Err(e);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    async fn revision(&self) -> Result<u64> {
        Ok(self.current_revision("revision").await? as u64)
    }

    async fn watch(&self, from_revision: u64) -> Result<Watch> {
        let prefix = format!("{}/", self.opts.prefix);
        let mut client = self.watcher();
        let start = |rev: u64| {
            WatchOptions::new()
                .with_prefix()
                .with_start_revision(rev as i64 + 1)
        };
        let mut stream = self
            .timed(
                "watch",
                client.watch(prefix.clone(), Some(start(from_revision))),
            )
            .await?;
        let (tx, rx) = mpsc::channel(1024);
        let key_prefix = self.opts.prefix.clone();
        let this = self.clone();
        let span = tracing::info_span!("store_watch", backend = "etcd", prefix = %key_prefix);
        tokio::spawn(
            async move {
                // Bookmarks: after the events of a burst (nothing more for PROGRESS_SETTLE), and
                // every PROGRESS_EVERY besides (writes outside the prefix move the revision too),
                // etcd is asked for the watch's progress; its answer, a response without events
                // once the watch has sent everything up to the store's revision, becomes a
                // `WatchItem::Bookmark` (etcd's `WatchProgressRequest`).
                let mut progress_due = Some(tokio::time::Instant::now());
                let mut every = tokio::time::interval(PROGRESS_EVERY);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    let settle = async {
                        match progress_due {
                            Some(at) => tokio::time::sleep_until(at).await,
                            None => std::future::pending().await,
                        }
                    };
                    let msg = tokio::select! {
                        m = stream.message() => m,
                        _ = tx.closed() => return,
                        _ = settle => {
                            progress_due = None;
                            // A failure means the stream is gone: its next message says why.
                            let _ = stream.request_progress().await;
                            continue;
                        }
                        _ = every.tick() => {
                            let _ = stream.request_progress().await;
                            continue;
                        }
                    };
                    let resp = match msg {
                        Ok(Some(r)) => r,
                        Ok(None) => {
                            let _ = tx
                                .send(Err(failed("watch", "etcd ended the watch".into())))
                                .await;
                            return;
                        }
                        Err(e) => {
                            let _ = tx.send(Err(this.etcd_err("watch", e))).await;
                            return;
                        }
                    };
                    if resp.compact_revision() > 0 {
                        // History is gone: relist at the current revision, watch on from it.
                        let current = match this.current_revision("watch").await {
                            Ok(r) => r as u64,
                            Err(e) => {
                                let _ = tx.send(Err(e)).await;
                                return;
                            }
                        };
                        if tx
                            .send(Ok(WatchItem::Relist { revision: current }))
                            .await
                            .is_err()
                        {
                            return;
                        }
                        match client.watch(prefix.clone(), Some(start(current))).await {
                            Ok(s) => stream = s,
                            Err(e) => {
                                let _ = tx.send(Err(this.etcd_err("watch", e))).await;
                                return;
                            }
                        }
                        continue;
                    }
                    if resp.canceled() {
                        let _ = tx
                            .send(Err(failed(
                                "watch",
                                format!("etcd cancelled the watch: {}", resp.cancel_reason()),
                            )))
                            .await;
                        return;
                    }
                    if resp.events().is_empty() {
                        // The watch's creation says nothing of what was sent; a progress
                        // notification says every change up to its revision was.
                        if !resp.created()
                            && let Some(h) = resp.header()
                            && tx
                                .send(Ok(WatchItem::Bookmark {
                                    revision: h.revision() as u64,
                                }))
                                .await
                                .is_err()
                        {
                            return;
                        }
                        continue;
                    }
                    progress_due = Some(tokio::time::Instant::now() + PROGRESS_SETTLE);
                    for ev in resp.events() {
                        let Some(kvp) = ev.kv() else { continue };
                        let Some(key) = decode_key(&key_prefix, kvp.key()) else {
                            continue;
                        };
                        let item = WatchItem::Event(Event {
                            revision: kvp.mod_revision() as u64,
                            key,
                            deleted: ev.event_type() == EventType::Delete,
                        });
                        if tx.send(Ok(item)).await.is_err() {
                            return;
                        }
                    }
                }
            }
            .instrument(span),
        );
        Ok(rx)
    }

    fn backend(&self) -> &'static str {
        "etcd"
    }
}

/// Where the lease keys of the apps live: `<prefix>/_leases/`. Inside the store's prefix, so an
/// etcd user limited to `<prefix>/` can coordinate, and outside the object keys, which have
/// four segments (`_` starts no API group).
fn leases_prefix(prefix: &str) -> String {
    format!("{prefix}/_leases/")
}

/// Reads who holds each app (by app name).
///
/// # Errors
///
/// [`Error::Backend`].
pub async fn holders(store: &EtcdStore) -> Result<BTreeMap<String, Holder>> {
    let prefix = leases_prefix(&store.opts.prefix);
    let mut kv = store.kv();
    let resp = store
        .timed(
            "holders",
            kv.get(prefix.clone(), Some(GetOptions::new().with_prefix())),
        )
        .await?;
    let mut out = BTreeMap::new();
    for kvp in resp.kvs() {
        let (Ok(k), Ok(v)) = (kvp.key_str(), kvp.value_str()) else {
            continue;
        };
        if let Some(app) = k.strip_prefix(&prefix) {
            out.insert(
                app.to_string(),
                Holder {
                    replica: v.to_string(),
                    since_revision: kvp.create_revision() as u64,
                    lease: kvp.lease(),
                },
            );
        }
    }
    Ok(out)
}

/// The replicas of one agent deployment sharing apps through etcd leases.
///
/// Each replica has one etcd lease of [`Replicas::ttl`], kept alive every third of it. It
/// registers `<prefix>/_replicas/<name>` (with the apps it runs) under that lease, and takes an
/// app by creating `<prefix>/_leases/<app>` under it in a transaction that requires the key to
/// be absent. A replica that dies stops keeping its lease alive; etcd deletes its keys when the
/// lease expires (at most `ttl` later), the other replicas see the deletion on their watch and
/// one of them takes the app. How apps spread is `plan_pass`: the replica with the fewest
/// apps among those that run a free app takes it at once (any other after a third of the
/// TTL), and one app per third of the TTL moves to a replica holding two fewer.
///
/// A replica that cannot reach etcd for longer than two thirds of the TTL drops every app
/// (its gates close) before the lease can expire at the server, and takes them back when its
/// lease proves alive again; its writes are fenced in any case (see [`EtcdStore::fenced`]).
pub struct Replicas {
    store: EtcdStore,
    name: String,
    ttl: Duration,
    apps: Vec<String>,
    gates: HashMap<String, watch::Sender<Option<Fence>>>,
    /// True once a pass has succeeded: this replica knows who holds what.
    coordinated: watch::Sender<bool>,
    /// Tests only: how long each pass waits before its first request, to play a slow etcd.
    #[cfg(test)]
    pass_delay: Duration,
}

impl Replicas {
    /// Coordination for `apps` as replica `name` (unique among the replicas) with leases of
    /// `ttl` (whole seconds, at least 2).
    pub fn new(store: &EtcdStore, name: &str, ttl: Duration, apps: Vec<String>) -> Self {
        let gates = apps
            .iter()
            .map(|a| (a.clone(), watch::channel(None).0))
            .collect();
        Self {
            store: store.clone(),
            name: name.to_string(),
            ttl: ttl.max(Duration::from_secs(2)),
            apps,
            gates,
            coordinated: watch::channel(false).0,
            #[cfg(test)]
            pass_delay: Duration::ZERO,
        }
    }

    /// The replica's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The lease time to live.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// True once this replica has read who holds what (its first pass succeeded): until then a
    /// replica holding nothing cannot tell whether that is right, so it is not ready.
    pub fn coordinated(&self) -> watch::Receiver<bool> {
        self.coordinated.subscribe()
    }

    /// The gate of `app`: `Some(fence)` while this replica holds it. `None` for an unknown app.
    pub fn gate(&self, app: &str) -> Option<watch::Receiver<Option<Fence>>> {
        self.gates.get(app).map(|g| g.subscribe())
    }

    fn lease_key(&self, app: &str) -> String {
        format!("{}{app}", leases_prefix(&self.store.opts.prefix))
    }

    fn replicas_prefix(&self) -> String {
        format!("{}/_replicas/", self.store.opts.prefix)
    }

    fn replica_key(&self) -> String {
        format!("{}{}", self.replicas_prefix(), self.name)
    }

    fn drop_all(&self) {
        for g in self.gates.values() {
            g.send_if_modified(|f| f.take().is_some());
        }
    }

    /// Runs the coordination until `shutdown` becomes true, then gives every app back (deletes
    /// its keys by revoking the lease) so the other replicas take over at once.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let mut failures = 0u32;
        let mut lease = None;
        loop {
            if *shutdown.borrow() {
                return;
            }
            match self.session(&mut lease, &mut shutdown).await {
                Ok(()) => return,
                Err(e) => {
                    self.drop_all();
                    failures += 1;
                    let delay = Duration::from_millis(500)
                        .saturating_mul(1 << failures.min(5))
                        .min(self.ttl);
                    tracing::warn!(error = %chain(&e), retry_in = ?delay, "Replica coordination through etcd failed; every app is released until it works again");
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = shutdown.changed() => return,
                    }
                }
            }
        }
    }

    /// One lease's life: grant (or keep `current` when it is still alive, as after etcd
    /// restarted), register, take apps, keep alive; returns `Ok` on shutdown.
    async fn session(
        &self,
        current: &mut Option<i64>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<()> {
        let store = &self.store;
        let mut lease = store.client.lease_client();
        let mut kv = store.kv();
        // Taken before the first request: the lease lives at least `ttl` past any moment
        // before the server granted or renewed it.
        let started = tokio::time::Instant::now();
        let remaining = match *current {
            Some(id) => store
                .timed("lease", lease.time_to_live(id, None))
                .await?
                .ttl(),
            None => 0,
        };
        let (id, mut acked_sent) = match *current {
            Some(id) if remaining > 0 => {
                tracing::info!(replica = %self.name, lease = format_args!("{id:x}"), "Replica lease still alive; keeping it");
                // Expires `remaining` seconds after `started` at the latest, as if renewed at
                // this instant.
                let renewed = (started + Duration::from_secs(remaining as u64))
                    .checked_sub(self.ttl)
                    .unwrap_or(started);
                (id, renewed.min(started))
            }
            _ => {
                let granted = store
                    .timed("lease", lease.grant(self.ttl.as_secs() as i64, None))
                    .await?;
                let id = granted.id();
                tracing::info!(replica = %self.name, lease = format_args!("{id:x}"), ttl_seconds = self.ttl.as_secs(), "Replica lease granted");
                (id, started)
            }
        };
        *current = Some(id);
        // Register, unless a live replica already has this name (names must be unique: two
        // replicas of one name would both take its apps).
        let key = self.replica_key();
        let registration = serde_json::to_string(&Registration {
            apps: self.apps.iter().cloned().collect(),
        })
        .unwrap_or_default();
        let registered = store
            .timed(
                "lease",
                kv.txn(
                    create_under_lease(&key, registration.as_bytes(), id)
                        .or_else([TxnOp::get(key.as_bytes(), None)]),
                ),
            )
            .await?;
        if !registered.succeeded() {
            let other = registered.op_responses().into_iter().find_map(|r| match r {
                TxnOpResponse::Get(g) => g.kvs().first().map(|k| k.lease()),
                _ => None,
            });
            if other != Some(id) {
                return Err(failed(
                    "lease",
                    format!(
                        "another live replica is named `{}` ({key}); replica names must be unique. Waiting for it to go",
                        self.name
                    ),
                ));
            }
        }
        let (mut keeper, mut acks) = store.timed("lease", lease.keep_alive(id)).await?;
        let mut watcher = store.watcher();
        let leases_prefix = leases_prefix(&store.opts.prefix);
        let mut changes = store
            .timed(
                "lease",
                watcher.watch(leases_prefix, Some(WatchOptions::new().with_prefix())),
            )
            .await?;
        let beat = self.ttl / 3;
        // When each keep-alive still unanswered was sent, oldest first (etcd answers them in
        // order on the stream).
        let mut unanswered: VecDeque<tokio::time::Instant> = VecDeque::new();
        let mut tick = tokio::time::interval(beat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // A pass runs beside the keep-alives, never in their way: a slow pass (three etcd
        // round trips on a loaded machine) must not hold back the keep-alive or the reading of
        // its answers, or a live lease would look lost. The pass owns the memory while it runs.
        let mut memory = Some(PassMemory::default());
        let mut running: Option<Pin<Box<dyn Future<Output = PassDone> + Send + '_>>> = None;
        let mut again = false;
        let result = loop {
            if running.is_none()
                && again
                && let Some(mut m) = memory.take()
            {
                again = false;
                running = Some(Box::pin(async move {
                    let r = self.pass(id, &mut m).await;
                    (m, r)
                }));
            }
            tokio::select! {
                biased;
                _ = shutdown.changed() => break Ok(()),
                ack = acks.message() => match ack {
                    Ok(Some(a)) if a.ttl() > 0 => {
                        if let Some(sent) = unanswered.pop_front() {
                            acked_sent = acked_sent.max(sent);
                        }
                    }
                    Ok(Some(_)) => break Err(failed("lease", "the lease expired".into())),
                    Ok(None) => break Err(failed("lease", "etcd ended the keep-alive stream".into())),
                    Err(e) => break Err(store.etcd_err("lease", e)),
                },
                change = changes.message() => match change {
                    Ok(Some(resp)) => {
                        if resp.events().iter().any(|e| e.event_type() == EventType::Delete) {
                            again = true;
                        }
                    }
                    Ok(None) => break Err(failed("lease", "etcd ended the watch of the leases".into())),
                    Err(e) => break Err(store.etcd_err("lease", e)),
                },
                (m, r) = async { running.as_mut().expect("guarded").await }, if running.is_some() => {
                    running = None;
                    memory = Some(m);
                    if let Err(e) = r {
                        tracing::warn!(error = %chain(&e), "Taking apps failed; trying again");
                    }
                }
                _ = tick.tick() => {
                    let now = tokio::time::Instant::now();
                    match store.timed("lease", keeper.keep_alive()).await {
                        Ok(()) => unanswered.push_back(now),
                        Err(e) => tracing::warn!(error = %e, "Lease keep-alive not sent"),
                    }
                    // Let go of the apps well before the lease could expire at the server
                    // (writes are fenced in any case).
                    if acked_sent.elapsed() > self.ttl * 2 / 3 {
                        break Err(failed("lease", format!("no keep-alive answered for {:?}; the lease may be about to expire", acked_sent.elapsed())));
                    }
                    again = true;
                }
            }
        };
        drop(running);
        self.drop_all();
        if result.is_ok() {
            // Give the apps back at once rather than after the TTL.
            let _ = store.timed("lease", lease.revoke(id)).await;
            *current = None;
            tracing::info!(replica = %self.name, "Replica lease revoked; apps released");
        }
        result
    }

    /// One look at who holds what: keep the gates of the apps this replica holds open, take
    /// free apps (see `plan_pass`), clear stale lease keys, and give back at most one app per
    /// keep-alive interval when another replica that can run it holds two fewer.
    async fn pass(&self, lease: i64, memory: &mut PassMemory) -> Result<()> {
        #[cfg(test)]
        tokio::time::sleep(self.pass_delay).await;
        let store = &self.store;
        let mut kv = store.kv();
        let registered = store
            .timed(
                "lease",
                kv.get(
                    self.replicas_prefix(),
                    Some(GetOptions::new().with_prefix()),
                ),
            )
            .await?;
        let mut replicas: BTreeMap<String, Option<BTreeSet<String>>> = BTreeMap::new();
        for kvp in registered.kvs() {
            let (Ok(k), Ok(v)) = (kvp.key_str(), kvp.value_str()) else {
                continue;
            };
            if let Some(name) = k.strip_prefix(&self.replicas_prefix()) {
                let apps = serde_json::from_str::<Registration>(v).ok().map(|r| r.apps);
                replicas.insert(name.to_string(), apps);
            }
        }
        let holders = holders(store).await?;
        for app in &self.apps {
            let mine = holders
                .get(app)
                .filter(|h| h.replica == self.name && h.lease == lease);
            let gate = &self.gates[app];
            match mine {
                Some(h) => {
                    let fence = Fence {
                        key: self.lease_key(app),
                        created: h.since_revision as i64,
                    };
                    gate.send_if_modified(|f| {
                        if f.as_ref() != Some(&fence) {
                            *f = Some(fence.clone());
                            true
                        } else {
                            false
                        }
                    });
                }
                None => {
                    if gate.send_if_modified(|f| f.take().is_some()) {
                        tracing::warn!(%app, holder = ?holders.get(app).map(|h| &h.replica), "App taken by another replica");
                    }
                }
            }
        }
        let now = tokio::time::Instant::now();
        let plan = plan_pass(
            &self.name,
            lease,
            &self.apps,
            &replicas,
            &holders,
            memory,
            now,
            self.ttl / 3,
        );
        for (app, created) in &plan.clear {
            // A lease key without a live lease or a registered replica (written by hand, or
            // copied with its lease lost): nobody would ever take the app. Seen stale on two
            // passes; removed only if unchanged.
            let key = self.lease_key(app);
            store
                .timed("lease", kv.txn(delete_if_created(&key, *created)))
                .await?;
            tracing::warn!(%app, %key, "Stale lease key removed: it had no live lease or replica");
        }
        for app in &plan.take {
            let key = self.lease_key(app);
            let resp = store
                .timed(
                    "lease",
                    kv.txn(create_under_lease(&key, self.name.as_bytes(), lease)),
                )
                .await?;
            memory.free_since.remove(app);
            if resp.succeeded() {
                let created = resp.header().map(|h| h.revision()).unwrap_or(0);
                tracing::info!(%app, replica = %self.name, "App lease taken");
                self.gates[app].send_replace(Some(Fence { key, created }));
            }
        }
        if let Some(app) = &plan.give_back {
            let key = self.lease_key(app);
            let created = self.gates[app]
                .borrow()
                .as_ref()
                .map(|f| f.created)
                .unwrap_or(0);
            self.gates[app].send_replace(None);
            memory.last_give_back = Some(now);
            store
                .timed("lease", kv.txn(delete_if_created(&key, created)))
                .await?;
            tracing::info!(%app, replica = %self.name, "App lease given back to balance the replicas");
        }
        self.coordinated
            .send_if_modified(|c| !std::mem::replace(c, true));
        Ok(())
    }
}

/// A finished pass: the memory it had, and what came of it.
type PassDone = (PassMemory, Result<()>);

/// A transaction that creates `key` with `value` under `lease` only if it is absent.
fn create_under_lease(key: &str, value: &[u8], lease: i64) -> Txn {
    Txn::new()
        .when([Compare::create_revision(
            key.as_bytes(),
            CompareOp::Equal,
            0,
        )])
        .and_then([TxnOp::put(
            key.as_bytes(),
            value,
            Some(PutOptions::new().with_lease(lease)),
        )])
}

/// A transaction that deletes `key` only if it is still the key created at `created`.
fn delete_if_created(key: &str, created: i64) -> Txn {
    Txn::new()
        .when([Compare::create_revision(
            key.as_bytes(),
            CompareOp::Equal,
            created,
        )])
        .and_then([TxnOp::delete(key.as_bytes(), None)])
}

/// The value of a replica's registration key: the apps it can run.
#[derive(serde::Serialize, serde::Deserialize)]
struct Registration {
    apps: BTreeSet<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_near_the_part_size_is_counted_whole_where_it_may_stay_inline() {
        // Below, at and just above PART_BYTES (where the store's metadata may take the stored
        // text either side): counted whole, never as a marker.
        for n in [10, PART_BYTES - 100, PART_BYTES, PART_BYTES + STAMP_SLACK] {
            assert_eq!(stored_size(n), n + STAMP_SLACK, "{n}");
        }
        // Surely split: its marker.
        assert_eq!(stored_size(PART_BYTES + STAMP_SLACK + 1), 256);
        assert_eq!(stored_size(3 << 20), 256);
    }

    /// A single-member etcd on loopback with its data in memory, killed on drop: the binary
    /// in `ETCD_BIN` (the etcd 3.6 `scripts/test` builds), else `etcd` on the PATH. A missing
    /// binary fails the test; it never skips it.
    struct LocalEtcd {
        child: std::process::Child,
        endpoint: String,
        _dir: tempfile::TempDir,
    }

    impl LocalEtcd {
        fn start() -> Self {
            let port = || {
                std::net::TcpListener::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap()
                    .port()
            };
            let (client, peer) = (
                format!("http://127.0.0.1:{}", port()),
                format!("http://127.0.0.1:{}", port()),
            );
            let dir = tempfile::Builder::new()
                .tempdir_in("/dev/shm")
                .or_else(|_| tempfile::tempdir())
                .unwrap();
            let bin = std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".into());
            let child = std::process::Command::new(&bin)
                .arg("--data-dir")
                .arg(dir.path().join("data"))
                .args(["--listen-client-urls", &client])
                .args(["--advertise-client-urls", &client])
                .args(["--listen-peer-urls", &peer])
                .args(["--initial-advertise-peer-urls", &peer])
                .args(["--initial-cluster", &format!("default={peer}")])
                .args(["--log-level", "warn"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap_or_else(|e| {
                    panic!("{bin} does not start ({e}): run the tests through scripts/test")
                });
            Self {
                child,
                endpoint: client,
                _dir: dir,
            }
        }
    }

    impl Drop for LocalEtcd {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    #[tokio::test]
    async fn a_slow_pass_does_not_hold_back_the_lease_keep_alive() {
        let etcd = LocalEtcd::start();
        let store = loop {
            let s = EtcdStore::connect(Options {
                endpoints: vec![etcd.endpoint.clone()],
                prefix: "/slow".into(),
                request_timeout: Duration::from_secs(2),
                ..Default::default()
            })
            .await
            .unwrap();
            if s.get(&ObjectKey::new("", "ConfigMap", "d", "x"))
                .await
                .is_ok()
            {
                break s;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        // Every pass takes longer than the 2 s lease: if the keep-alives waited for it, the
        // lease would expire at the server and the app would be dropped.
        let mut r = Replicas::new(&store, "slow", Duration::from_secs(2), vec!["app".into()]);
        r.pass_delay = Duration::from_millis(2500);
        let mut gate = r.gate("app").unwrap();
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(r.run(rx));
        tokio::time::timeout(Duration::from_secs(15), gate.wait_for(Option::is_some))
            .await
            .expect("taken once the first pass ends")
            .unwrap();
        let held =
            tokio::time::timeout(Duration::from_secs(8), gate.wait_for(Option::is_none)).await;
        assert!(
            held.is_err(),
            "the app was dropped while its lease was kept alive"
        );
        let h = holders(&store).await.unwrap();
        assert_eq!(h["app"].replica, "slow");
        stop.send(true).unwrap();
        task.await.unwrap();
    }

    #[test]
    fn keys_carry_group_kind_namespace_and_name_and_read_back() {
        let k = ObjectKey::new("", "ConfigMap", "default", "app");
        let raw = encode_key("/driftless", &k).unwrap();
        assert_eq!(raw, "/driftless//ConfigMap/default/app");
        assert_eq!(decode_key("/driftless", raw.as_bytes()), Some(k));
        let c = ObjectKey::new("rbac.authorization.k8s.io", "ClusterRole", "", "view");
        let raw = encode_key("/d", &c).unwrap();
        assert_eq!(raw, "/d/rbac.authorization.k8s.io/ClusterRole//view");
        assert_eq!(decode_key("/d", raw.as_bytes()), Some(c));
        // Keys of another layout, or another prefix, are not objects.
        assert_eq!(decode_key("/d", b"/d/x/y"), None);
        assert_eq!(decode_key("/d", b"/dx//ConfigMap/a/b"), None);
        assert_eq!(decode_key("/d", b"/d/_leases/app"), None);
        assert_eq!(decode_key("/d", b"/d/_replicas/r1"), None);
        // Another install under `/d/x` has five segments after `/d/`.
        assert_eq!(decode_key("/d", b"/d/x//ConfigMap/default/a"), None);
        assert!(encode_key("/d", &ObjectKey::new("", "K", "", "a/b")).is_err());
        assert!(encode_key("/d", &ObjectKey::new("a/b", "K", "", "n")).is_err());
    }

    #[test]
    fn a_prefix_range_ends_after_every_key_that_starts_with_it() {
        assert_eq!(prefix_end(b"/d/"), b"/d0".to_vec());
        assert_eq!(prefix_end(&[b'a', 0xff]), b"b".to_vec());
        assert_eq!(prefix_end(&[0xff]), vec![0]);
    }
}
