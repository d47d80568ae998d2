//! The target store: the [`Store`] trait (ARCHITECTURE.md section 4) and its backends.
//!
//! Every backend gives etcd's model: one store revision that only grows; each committed
//! transaction gets the next revision and every object it writes carries
//! `metadata.resourceVersion` = that revision; compare-and-swap on resourceVersion for puts and
//! deletes; `metadata.generation` that goes up by one on every change outside `metadata` and
//! `status`; and a change feed ([`Store::watch`]) in revision order that resumes from a revision
//! and asks for a relist when that history is gone.
//!
//! Backends: [`sqlite`] (the embedded default: one file, WAL, a change-log table polled
//! cheaply so writes from other processes are seen), `etcd` (cargo feature `etcd`: a cluster
//! shared by several agent replicas), `kubernetes` (cargo feature `kubernetes`: an API server,
//! which promises less, see [`Promises`]) and [`memory`] (tests).

pub mod cached;
mod checkpoint;
mod config;
mod gzip;
pub use config::{EtcdConfig, EtcdTlsConfig, KubernetesConfig, SqliteConfig, StoreConfig};

#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "kubernetes")]
pub mod kubernetes;
pub mod memory;
pub mod sqlite;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::{mpsc, watch};

use crate::object::{Object, ObjectKey};

/// The label naming the app that owns an object, added by the sync on stores that apply
/// declared fields ([`Promises::server_side_apply`]: Kubernetes), whose change feed selects
/// by it.
pub const APP_LABEL: &str = "driftless.io/app";

/// Errors from a store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A compare-and-swap precondition did not hold: the object changed (or appeared, or went)
    /// since it was read. Nothing of the transaction was written.
    #[error("conflict on {key}: expected {expected}, found {found}")]
    Conflict {
        /// The object whose precondition failed.
        key: Box<ObjectKey>,
        /// What the writer expected, e.g. `resourceVersion 12` or `absent`.
        expected: String,
        /// What the store holds, e.g. `resourceVersion 14` or `absent`.
        found: String,
    },
    /// The watch asked for history that has been compacted away; relist and watch from the
    /// listing's revision.
    #[error("revision {requested} has been compacted (oldest kept: {oldest})")]
    Compacted {
        /// The revision asked for.
        requested: u64,
        /// The oldest revision whose changes are still kept.
        oldest: u64,
    },
    /// A stored value is not a valid object.
    #[error("stored value of {key} is not a valid object")]
    Corrupt {
        /// The object's key.
        key: ObjectKey,
        /// Why it does not parse.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The backend failed (I/O, locking, a lost connection).
    #[error("store backend failed during {op}")]
    Backend {
        /// The operation, e.g. `commit`, `open`.
        op: &'static str,
        /// The backend's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Proof that this agent replica holds an app (etcd replicas): the app's lease key and the
/// revision at which this replica created it. While that key still has that
/// `create_revision`, the replica holds the app, and a fenced store's writes require it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    /// The app's lease key, e.g. `/driftless.leases/guestbook`.
    pub key: String,
    /// The key's `create_revision` when this replica took it.
    pub created: i64,
}

/// Result alias for store operations.
pub type Result<T> = std::result::Result<T, Error>;

/// A compare-and-swap condition on a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// Write whatever the store holds (an out-of-band writer such as `driftless store put`).
    Any,
    /// The object must not exist (create).
    Absent,
    /// The object must exist with exactly this resourceVersion.
    ResourceVersion(u64),
}

impl Precondition {
    /// The precondition that expects exactly `current`: its resourceVersion, or absence.
    pub fn matching(current: Option<&Object>) -> Self {
        match current.and_then(Object::resource_version) {
            Some(rv) => Precondition::ResourceVersion(rv),
            None => Precondition::Absent,
        }
    }

    /// Checks this precondition against what the store holds for `key`.
    ///
    /// # Errors
    ///
    /// [`Error::Conflict`] when it does not hold.
    pub fn check(self, key: &ObjectKey, current: Option<&Object>) -> Result<()> {
        self.check_found(
            key,
            current.is_some(),
            current.and_then(Object::resource_version),
        )
    }

    /// [`Precondition::check`] against only the version the store holds for `key` (`None`:
    /// absent), for a delete that need not read, or cannot parse, the stored value.
    ///
    /// # Errors
    ///
    /// As [`Precondition::check`].
    pub fn check_version(self, key: &ObjectKey, current: Option<u64>) -> Result<()> {
        self.check_found(key, current.is_some(), current)
    }

    fn check_found(self, key: &ObjectKey, exists: bool, found_rv: Option<u64>) -> Result<()> {
        let ok = match self {
            Precondition::Any => true,
            Precondition::Absent => !exists,
            Precondition::ResourceVersion(rv) => found_rv == Some(rv),
        };
        if ok {
            return Ok(());
        }
        let describe = |rv: Option<u64>, exists: bool| match (exists, rv) {
            (false, _) => "absent".to_string(),
            (true, Some(rv)) => format!("resourceVersion {rv}"),
            (true, None) => "present".to_string(),
        };
        Err(Error::Conflict {
            key: Box::new(key.clone()),
            expected: match self {
                Precondition::Any => "anything".into(),
                Precondition::Absent => "absent".into(),
                Precondition::ResourceVersion(rv) => format!("resourceVersion {rv}"),
            },
            found: describe(found_rv, exists),
        })
    }
}

/// One write of a transaction.
#[derive(Clone, Debug)]
pub enum Write {
    /// Store `object` under its key (replacing what is there), if `precondition` holds.
    Put {
        /// The object. Store-set metadata in it (`resourceVersion`, `generation`,
        /// `creationTimestamp`) is replaced by the store.
        object: Object,
        /// The compare-and-swap condition.
        precondition: Precondition,
        /// The object's compact JSON made already (by the desired set's digest), which a store
        /// that keeps text writes with its own metadata put in ([`Stamp::text_from`]) instead
        /// of serializing the object again; `None`: serialized as usual. Stores that keep
        /// objects ignore it.
        json: Option<ObjectJson>,
    },
    /// Store a record of driftless's own given as JSON text (see [`RecordText`]), replacing
    /// what is there, if `precondition` holds: as `Put` of the same record as an object.
    PutRecord {
        /// The record.
        record: RecordText,
        /// The compare-and-swap condition.
        precondition: Precondition,
    },
    /// Remove the object under `key`, if `precondition` holds. Deleting an absent object with
    /// [`Precondition::Any`] is a no-op.
    Delete {
        /// The object to remove.
        key: ObjectKey,
        /// The compare-and-swap condition.
        precondition: Precondition,
    },
}

impl Write {
    /// The key this write touches.
    pub fn key(&self) -> ObjectKey {
        match self {
            Write::Put { object, .. } => object.key(),
            Write::PutRecord { record, .. } => record.key(),
            Write::Delete { key, .. } => key.clone(),
        }
    }

    /// The compare-and-swap condition of this write.
    pub fn precondition(&self) -> Precondition {
        match self {
            Write::Put { precondition, .. }
            | Write::PutRecord { precondition, .. }
            | Write::Delete { precondition, .. } => *precondition,
        }
    }

    /// The compare-and-swap condition of this write, to change it.
    pub fn precondition_mut(&mut self) -> &mut Precondition {
        match self {
            Write::Put { precondition, .. }
            | Write::PutRecord { precondition, .. }
            | Write::Delete { precondition, .. } => precondition,
        }
    }

    /// This write with a [`Write::PutRecord`] turned into the [`Write::Put`] of its object, for
    /// backends that keep objects rather than text (the memory store).
    ///
    /// # Errors
    ///
    /// [`Error::Corrupt`] when the record's text does not parse (a bug in its writer).
    pub fn into_object_write(self) -> Result<Write> {
        Ok(match self {
            Write::PutRecord {
                record,
                precondition,
            } => Write::Put {
                object: record.to_object()?,
                precondition,
                json: None,
            },
            w => w,
        })
    }
}

/// A record of driftless's own (the reserved group: an app's inventory or status) handed to a
/// store as JSON text rather than as an [`Object`]. Such a record is megabytes at 10,000
/// objects, and an [`Object`] of it would be a deep copy of every entry (the entries are
/// shared, `Arc`, with the desired set; a JSON tree cannot share them), built only to be
/// serialized. The text is made once from the entries in place ([`RecordText::new`]); a store
/// puts its own metadata in front ([`RecordText::text`]).
///
/// Shape: the record's head (`apiVersion` [`crate::object::RESERVED_API_VERSION`], `kind`,
/// `metadata` with `name` and what the store sets) followed by the record's own fields, the
/// same JSON a [`Write::Put`] of the record as an object stores.
#[derive(Clone, Debug)]
pub struct RecordText {
    kind: String,
    name: String,
    /// The record's own fields as JSON object members without the braces (`"spec":{...}`),
    /// empty when it has none.
    members: Arc<String>,
}

/// Refuses a record's own field that its head holds (`apiVersion`, `kind`, `metadata`): a
/// second one in the text would override the store's.
fn own_field(field: &str) -> std::result::Result<(), serde_json::Error> {
    if matches!(field, "apiVersion" | "kind" | "metadata") {
        return Err(<serde_json::Error as serde::ser::Error>::custom(format!(
            "a record's own field cannot be `{field}`: the store's head holds it"
        )));
    }
    Ok(())
}

/// Bytes a record's buffer keeps spare for the head moved in front of its own fields
/// ([`RecordText::into_text`]): a stamped head (name, resourceVersion, generation,
/// creationTimestamp) is about 150.
const HEAD_ROOM: usize = 512;

impl RecordText {
    /// The record `kind`/`name` of the reserved group with one field of its own, `field`
    /// (e.g. `spec`), whose value is `value` serialized (e.g. a struct of borrowed entries).
    ///
    /// # Errors
    ///
    /// A `serde_json` error when `value` fails to serialize, or when `field` is one the head
    /// holds (`apiVersion`, `kind`, `metadata`): a second one in the text would override the
    /// store's.
    pub fn new(
        kind: &str,
        name: &str,
        field: &str,
        value: &impl serde::Serialize,
    ) -> std::result::Result<Self, serde_json::Error> {
        Self::with_json(kind, name, field, |out| serde_json::to_writer(out, value))
    }

    /// [`Self::new`] with the value's JSON written by `write` (appended to the buffer it is
    /// given), for a value made in parts (an inventory's entries, on all cores). `write` must
    /// append exactly one JSON value: the store writes the text as it is.
    ///
    /// # Errors
    ///
    /// As [`Self::new`]; `write`'s error; text that is not UTF-8.
    pub fn with_json(
        kind: &str,
        name: &str,
        field: &str,
        write: impl FnOnce(&mut Vec<u8>) -> std::result::Result<(), serde_json::Error>,
    ) -> std::result::Result<Self, serde_json::Error> {
        own_field(field)?;
        // One buffer for the members, with spare capacity for the head a store puts in front
        // of them ([`Self::into_text`]): a record is tens of megabytes at 100,000 objects, and
        // each copy of it counts in the peak.
        let mut members = Vec::with_capacity(HEAD_ROOM + 4096);
        serde_json::to_writer(&mut members, field)?;
        members.push(b':');
        write(&mut members)?;
        Self::made(kind, name, members)
    }

    /// [`Self::with_json`] around a JSON text made already and given whole (`body`: an
    /// inventory's entries, made on all cores): `before` appends what comes ahead of it after
    /// `"field":`, `after` what follows it. The record's fields are made in `body`'s own buffer,
    /// moved along to make room in front, rather than copied into a new one: a new buffer of
    /// the record's size (megabytes at 10,000 objects) was that much fresh memory to fault in
    /// and fill.
    ///
    /// Gives the record and where `body` begins in its own fields' text (for
    /// `Self::object_json`).
    ///
    /// # Errors
    ///
    /// As [`Self::with_json`].
    pub fn around(
        kind: &str,
        name: &str,
        field: &str,
        before: impl FnOnce(&mut Vec<u8>) -> std::result::Result<(), serde_json::Error>,
        body: Vec<u8>,
        after: impl FnOnce(&mut Vec<u8>) -> std::result::Result<(), serde_json::Error>,
    ) -> std::result::Result<(Self, usize), serde_json::Error> {
        own_field(field)?;
        let mut front = Vec::with_capacity(256);
        serde_json::to_writer(&mut front, field)?;
        front.push(b':');
        before(&mut front)?;
        let at = front.len();
        let mut members = body;
        members.reserve(front.len() + HEAD_ROOM + 64);
        members.splice(0..0, front);
        after(&mut members)?;
        Ok((Self::made(kind, name, members)?, at))
    }

    /// The JSON of an object within this record's own fields, bytes `start..end` of them
    /// with `metadata` closing at `meta_close` ([`ObjectJson::new`], which checks the span's
    /// shape), shared rather than copied: for a store to write the object from
    /// ([`Write::Put::json`]). The caller vouches that it is that object's JSON.
    pub(crate) fn object_json(
        &self,
        start: usize,
        end: usize,
        meta_close: usize,
    ) -> Option<ObjectJson> {
        ObjectJson::new(self.members.clone(), start, end, meta_close)
    }

    /// The record of `kind`/`name` whose own fields are `members` (JSON object members,
    /// checked to be UTF-8), with room kept for the head.
    fn made(
        kind: &str,
        name: &str,
        members: Vec<u8>,
    ) -> std::result::Result<Self, serde_json::Error> {
        let mut members =
            String::from_utf8(members).map_err(<serde_json::Error as serde::ser::Error>::custom)?;
        members.reserve(HEAD_ROOM);
        Ok(RecordText {
            kind: kind.into(),
            name: name.into(),
            members: Arc::new(members),
        })
    }

    /// The record's key (reserved group, no namespace).
    pub fn key(&self) -> ObjectKey {
        ObjectKey::new(crate::object::RESERVED_GROUP, &self.kind, "", &self.name)
    }

    /// The record without its own fields: `apiVersion`, `kind` and `metadata.name`, for a
    /// store to stamp ([`stamp_record`]) and to give back in [`Committed::stored`].
    pub fn head(&self) -> Object {
        Object::reserved(&self.kind, &self.name, serde_json::Map::new())
    }

    /// The whole record's JSON text: `head` (this record's [`Self::head`], as the store
    /// stamped it) followed by the record's own fields.
    pub fn text(&self, head: &Object) -> String {
        match Self::head_before_fields(head) {
            Some(mut text) if !self.members.is_empty() => {
                text.reserve(self.members.len() + 1);
                text.push_str(&self.members);
                text.push('}');
                text
            }
            _ => head.to_json(),
        }
    }

    /// [`Self::text`], made in the buffer of the record's own fields when nothing else holds
    /// them (a clone of this record does): the head is moved in front of them instead of both
    /// being copied into a new string, so the record is in memory once.
    pub fn into_text(self, head: &Object) -> String {
        if self.members.is_empty() {
            return head.to_json();
        }
        match Arc::try_unwrap(self.members) {
            Ok(mut members) => match Self::head_before_fields(head) {
                Some(front) => {
                    members.insert_str(0, &front);
                    members.push('}');
                    members
                }
                None => head.to_json(),
            },
            Err(members) => RecordText {
                kind: self.kind,
                name: self.name,
                members,
            }
            .text(head),
        }
    }

    /// The gzip of what [`Self::into_text`] puts after the head (the record's own fields and
    /// the closing brace), at `level`: one member of a multi-member gzip (RFC 1952, 2.2) whose
    /// first member is the gzip of [`Self::head_before_fields`]. Made apart from the head
    /// (before the store stamps it), so that a large record is compressed beside other work.
    /// `None` when the record has no fields of its own (its text is the head alone).
    pub(crate) fn gzip_after_head(&self, level: u32) -> Option<Vec<u8>> {
        (!self.members.is_empty())
            .then(|| gzip::compress_parts(&[self.members.as_bytes(), b"}"], level))
    }

    /// What [`Self::text`] and [`Self::into_text`] put in front of the record's own fields:
    /// `head`'s JSON without its closing brace, and a comma. `None` when that JSON does not end
    /// with a brace (an object's always does): the text is then the head alone.
    pub(crate) fn head_before_fields(head: &Object) -> Option<String> {
        let mut front = head.to_json();
        front.ends_with('}').then(|| {
            front.pop();
            front.push(',');
            front
        })
    }

    /// Bytes of the record's own fields (what a store sizes a transaction by).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// True when the record has no fields of its own.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The record as an [`Object`] (a parse of its text), for backends that keep objects.
    ///
    /// # Errors
    ///
    /// [`Error::Corrupt`] when the text does not parse (a bug in the record's writer).
    pub fn to_object(&self) -> Result<Object> {
        decode(&self.key(), &self.text(&self.head()))
    }
}

/// What a committed transaction did.
#[derive(Clone, Debug, Default)]
pub struct Committed {
    /// The store revision of the transaction (0 when it wrote nothing).
    pub revision: u64,
    /// The stored objects, one per `Put` in write order (with the store's metadata).
    pub stored: Vec<Stored>,
}

/// Which objects a listing returns: any combination of group, kind and namespace; `None`
/// matches everything. Objects of the reserved group are included only when `group` names it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    /// API group (empty string for core).
    pub group: Option<String>,
    /// Kind, exact.
    pub kind: Option<String>,
    /// Namespace (empty string for cluster-scoped).
    pub namespace: Option<String>,
}

impl Selector {
    /// True when `key` is selected.
    pub fn matches(&self, key: &ObjectKey) -> bool {
        let reserved_ok = !key.is_reserved() || self.group.as_deref() == Some(key.group());
        reserved_ok
            && self.group.as_ref().is_none_or(|g| *g == key.group())
            && self.kind.as_ref().is_none_or(|k| *k == key.kind())
            && self
                .namespace
                .as_ref()
                .is_none_or(|n| *n == key.namespace())
    }
}

/// An error and its sources, joined with `: ` (a source whose text the message already holds
/// is not repeated).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        let text = inner.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        src = inner.source();
    }
    s
}

/// A consistent read of many objects.
#[derive(Clone, Debug, Default)]
pub struct Listing {
    /// The store revision the read reflects.
    pub revision: u64,
    /// The objects found, by key.
    pub objects: BTreeMap<ObjectKey, Object>,
    /// Records [`Store::list`] found under the selector whose stored value is not a valid
    /// object, with why: a listing names bad records instead of failing for every record.
    /// Always empty from [`Store::get_many`], which fails instead. A caller that decides a
    /// deletion from a listing must treat a non-empty map as incomplete data (see
    /// [`Listing::complete`]).
    pub unreadable: BTreeMap<ObjectKey, String>,
}

impl Listing {
    /// The listing, or [`Error::Corrupt`] naming the first unreadable record: for callers that
    /// must not act on incomplete data.
    ///
    /// # Errors
    ///
    /// [`Error::Corrupt`] when a record under the selector is unreadable.
    pub fn complete(self) -> Result<Self> {
        match self.unreadable.into_iter().next() {
            Some((key, why)) => Err(Error::Corrupt {
                key,
                source: why.into(),
            }),
            None => Ok(Self {
                revision: self.revision,
                objects: self.objects,
                unreadable: BTreeMap::new(),
            }),
        }
    }
}

/// One change of the change feed. Events carry keys, not values: read the object when its
/// content matters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Revision of the transaction that made the change.
    pub revision: u64,
    /// The object changed.
    pub key: ObjectKey,
    /// True when the object was deleted, false when it was put.
    pub deleted: bool,
}

/// What [`Store::versions`] can tell of an object without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// Not known: read it.
    Unknown,
    /// Known to be absent.
    Absent,
    /// It exists at this resourceVersion.
    At(u64),
}

impl Version {
    /// From a version lookup: `Some(rv)` exists, `None` absent.
    pub fn from_lookup(rv: Option<u64>) -> Self {
        rv.map_or(Self::Absent, Self::At)
    }
}

/// An item of a watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchItem {
    /// A change, in revision order.
    Event(Event),
    /// History between the watcher's revision and `revision` is gone (compacted, or the
    /// watcher fell behind): relist everything it cares about, then carry on from here.
    Relist {
        /// The store revision the stream resumes after.
        revision: u64,
    },
    /// Every change up to `revision` has been sent (as Kubernetes' watch bookmarks and etcd's
    /// progress notifications say): a consumer keeping a view of the store may call it current
    /// to there. Sent by the SQLite store after each look that found changes; other backends
    /// may send none.
    Bookmark {
        /// The store revision every change up to which has been sent.
        revision: u64,
    },
}

/// A running watch: items arrive in revision order; dropping it stops the watch. A backend
/// failure arrives as an `Err` item and ends the stream; watch again from the last revision
/// seen.
pub type Watch = mpsc::Receiver<Result<WatchItem>>;

/// The store contract shared by every backend. See the module documentation.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// The object under `key`, or `None`.
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] or [`Error::Corrupt`].
    async fn get(&self, key: &ObjectKey) -> Result<Option<Object>>;

    /// The object under `key` as its stored JSON text, and its resourceVersion, for a caller
    /// that decodes it into types of its own without building a JSON tree first (driftless's
    /// large records: the inventory, the status). The text's own `metadata.resourceVersion`
    /// may be absent or stale: the version returned is the one to use. The default reads
    /// [`Store::get`] and encodes it again; a backend that keeps JSON text returns it as
    /// stored.
    ///
    /// # Errors
    ///
    /// As [`Store::get`].
    async fn get_json(&self, key: &ObjectKey) -> Result<Option<(String, u64)>> {
        Ok(self
            .get(key)
            .await?
            .map(|o| (o.to_json(), o.resource_version().unwrap_or(0))))
    }

    /// The resourceVersion of the object under `key`, without reading its body (to check that
    /// a cached copy is current). `None` when absent.
    ///
    /// # Errors
    ///
    /// [`Error::Backend`].
    async fn version_of(&self, key: &ObjectKey) -> Result<Option<u64>>;

    /// The objects under `keys` that exist, read at one revision.
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] or [`Error::Corrupt`]. A partial read is never returned.
    async fn get_many(&self, keys: &[ObjectKey]) -> Result<Listing>;

    /// The resourceVersion of each of `keys` (one [`Version`] per key, in order) as far as
    /// this store can tell without reading and decoding the bodies (an index lookup, a
    /// keys-only read, a watch cache). A sync uses it to skip reading and planning the objects
    /// whose resourceVersion has not moved since it last found them as declared
    /// ([`crate::sync::Verified`]). The default knows nothing ([`Version::Unknown`] for all).
    ///
    /// # Errors
    ///
    /// [`Error::Backend`].
    async fn versions(&self, keys: &[&ObjectKey]) -> Result<Vec<Version>> {
        Ok(vec![Version::Unknown; keys.len()])
    }

    /// Every object the selector matches, read at one revision. A record whose stored value is
    /// not a valid object is named in [`Listing::unreadable`], not returned as an error.
    ///
    /// # Errors
    ///
    /// [`Error::Backend`], or [`Error::Corrupt`] when the listing itself cannot be read.
    async fn list(&self, selector: &Selector) -> Result<Listing>;

    /// Applies `writes` atomically as one transaction with one new revision: all or nothing.
    /// An empty list commits nothing and returns revision 0. A backend that limits the size of
    /// a transaction (etcd: 128 operations by default) applies a longer list as several
    /// transactions in order, each atomic, and returns the last one's revision; the stored
    /// objects carry their own transaction's revision.
    ///
    /// # Errors
    ///
    /// [`Error::Conflict`] when a precondition fails (nothing is written), [`Error::Backend`].
    async fn commit(&self, writes: Vec<Write>) -> Result<Committed>;

    /// The current store revision (0 for an empty SQLite or memory store; etcd's cluster
    /// revision, shared with whatever else the cluster holds).
    ///
    /// # Errors
    ///
    /// [`Error::Backend`].
    async fn revision(&self) -> Result<u64>;

    /// The change feed: every change after `from_revision`, then new changes as they commit,
    /// including those of other processes. When the changes after `from_revision` are no longer
    /// kept, the first item is [`WatchItem::Relist`].
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] when the watch cannot start.
    async fn watch(&self, from_revision: u64) -> Result<Watch>;

    /// A short name of the backend for logs and status (`sqlite`, `memory`, ...).
    fn backend(&self) -> &'static str;

    /// True when [`Store::commit`] would apply `writes` as one transaction (all or nothing);
    /// false when it would split them (etcd beyond its transaction limits). A sync that
    /// creates objects records them in its inventory first when the commit is not atomic, so
    /// that a crash part way cannot leave objects nobody owns. SQLite and memory: always true.
    fn commits_atomically(&self, writes: &[Write]) -> bool {
        let _ = writes;
        true
    }

    /// Asks the backend whether it would accept `objects` (declarations about to be applied),
    /// writing nothing: Kubernetes runs a server-side dry run of each apply. Returns each
    /// refusal with the backend's message (validation, an unknown kind, admission, RBAC).
    /// Objects the backend cannot check before others are applied (a custom resource whose
    /// CRD is among `objects`, an object in a Namespace among `objects` that does not exist
    /// yet) are not refused here; the apply checks them. Default: no refusals (SQLite, etcd
    /// and memory take any object that passed the manifest rules).
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] when the check itself cannot run (the backend is unreachable).
    async fn check(&self, objects: &[Object]) -> Result<Vec<(ObjectKey, String)>> {
        let _ = objects;
        Ok(Vec::new())
    }

    /// Confirms that `live` differs from what applying `declared` would make of it (the
    /// backend's own normalization: Kubernetes turns `0.5` CPU into `500m` and fills in
    /// defaults), for an object the comparison with the live copy suspects of drift. Only
    /// suspects are confirmed, so a pass with no suspect asks nothing. Kubernetes: a
    /// server-side dry run of the apply, compared with the live object. Default: true (SQLite,
    /// etcd and memory store what they are given).
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] when the backend cannot answer.
    async fn confirm_drift(&self, declared: &Object, live: &Object) -> Result<bool> {
        let _ = (declared, live);
        Ok(true)
    }

    /// What a container object holds that is not in `owned`: for a Namespace, the objects in
    /// it; for a CustomResourceDefinition, the custom resources of its kind. Deleting the
    /// container deletes them, so a prune is held while this names any (up to a few, and how
    /// many in all). Objects the API server itself keeps in every Namespace
    /// (`kube-root-ca.crt`, the `default` ServiceAccount), Events, and objects owned through
    /// `ownerReferences` are not counted. Default: nothing (SQLite, etcd: no containers).
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] when a listing fails: the caller must then hold the prune.
    async fn holds_others(
        &self,
        container: &Object,
        owned: &std::collections::BTreeSet<ObjectKey>,
    ) -> Result<Option<String>> {
        let _ = (container, owned);
        Ok(None)
    }

    /// The field manager of this backend's writes, when it records field ownership
    /// (Kubernetes `managedFields`): left out when naming who changed a field. Default: none.
    fn field_manager(&self) -> Option<&str> {
        None
    }

    /// A handle on this same store (its caches and change feed shared) whose writes require
    /// `gate` to be open: with replicas, while this replica holds the app. `None` when the
    /// backend fences otherwise (etcd: `EtcdStore::fenced`, inside its transactions) or has no
    /// replicas (SQLite, memory).
    fn fenced(&self, gate: watch::Receiver<Option<Fence>>) -> Option<Arc<dyn Store>> {
        let _ = gate;
        None
    }

    /// What this backend promises where backends differ. Default: etcd's model, as SQLite,
    /// etcd and memory give it ([`Promises::ETCD_MODEL`]).
    fn promises(&self) -> Promises {
        Promises::ETCD_MODEL
    }

    /// Waits, at most `timeout`, for what the store does in the background after its commits
    /// (SQLite: copying its write-ahead log back into the file, see `store::checkpoint`): what
    /// every command does before the process exits. Nothing committed depends on it; true
    /// when nothing is left. Default: the store does nothing in the background.
    async fn settle(&self, timeout: std::time::Duration) -> bool {
        let _ = timeout;
        true
    }
}

/// What a backend promises where backends differ (ARCHITECTURE.md section 4): SQLite, etcd
/// and memory give etcd's model; a Kubernetes API server gives less, and says so here, so that
/// the sync and the contract suite rely only on what the backend gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Promises {
    /// A commit of several writes is one transaction, all or nothing (within the backend's
    /// size limits, see [`Store::commits_atomically`]). False: per object, in order, stopping
    /// at the first refusal.
    pub transactions: bool,
    /// One revision for the whole store: each commit gets the next, objects written together
    /// share it, and a listing or [`Store::get_many`] reflects one revision. False: each
    /// object has its own resourceVersion and reads are per object.
    pub global_revision: bool,
    /// The change feed carries every write in revision order. False: one watch per resource
    /// kind (objects labelled [`APP_LABEL`], and the backend's own records), merged in
    /// arrival order.
    pub ordered_feed: bool,
    /// A `Put` of an object (not a record) carries only the fields Git declares, with the
    /// app's label, and the backend merges them into the live object itself (Kubernetes
    /// server-side apply: sending the live object's other fields would make driftless their
    /// manager, so fields an HPA or a webhook set would become Git's). False: a `Put` stores
    /// the whole object given, and the sync sends the three-way merge of the declaration onto
    /// the live object.
    pub server_side_apply: bool,
}

impl Promises {
    /// SQLite, etcd and memory.
    pub const ETCD_MODEL: Promises = Promises {
        transactions: true,
        global_revision: true,
        ordered_feed: true,
        server_side_apply: false,
    };
}

/// Now as an RFC 3339 timestamp with seconds, e.g. `2026-11-29T12:00:00Z`. The text of the
/// current second is kept per thread: a commit of 10,000 creates stamps each with the time,
/// and formatting it each time was 8% of the thread that makes their texts.
pub fn now_rfc3339() -> String {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(u64, String)>> = const { std::cell::RefCell::new(None) };
    }
    let now = SystemTime::now();
    let Ok(since) = now.duration_since(SystemTime::UNIX_EPOCH) else {
        return humantime::format_rfc3339_seconds(now).to_string();
    };
    let second = since.as_secs();
    LAST.with_borrow_mut(|last| match last {
        Some((s, text)) if *s == second => text.clone(),
        _ => {
            let text = humantime::format_rfc3339_seconds(now).to_string();
            *last = Some((second, text.clone()));
            text
        }
    })
}

/// True when the two objects differ outside `metadata` and `status`: such a change bumps
/// `metadata.generation`, as in Kubernetes.
pub fn spec_changed(old: &Object, new: &Object) -> bool {
    if old.same(new) {
        return false;
    }
    let fields = |o: &Object| {
        o.as_map()
            .iter()
            .filter(|(k, _)| k.as_str() != "metadata" && k.as_str() != "status")
            .count()
    };
    // Compared in place: the same fields (in any order) with equal values.
    fields(old) != fields(new)
        || old
            .as_map()
            .iter()
            .filter(|(k, _)| k.as_str() != "metadata" && k.as_str() != "status")
            .any(|(k, v)| new.get(k) != Some(v))
}

/// Sets the store-managed metadata of an object about to be stored at `revision`:
/// `resourceVersion` (the revision, as a decimal string, as Kubernetes writes it), `generation`
/// (1 on create; +1 when [`spec_changed`]) and `creationTimestamp` (kept from `old`, or now).
pub fn stamp(old: Option<&Object>, new: Object, revision: u64) -> Object {
    stamp_of(old, &new, Some(revision)).apply(new)
}

/// The [`Stamp`] of [`stamp`], without applying it: `revision` `None` leaves
/// `resourceVersion` out (etcd learns it only when its transaction commits).
pub fn stamp_of(old: Option<&Object>, new: &Object, revision: Option<u64>) -> Stamp {
    let generation = match old {
        None => 1,
        Some(o) if spec_changed(o, new) => o.generation().max(1) + 1,
        Some(o) => o.generation().max(1),
    };
    let created = old
        .and_then(|o| o.metadata().get("creationTimestamp").cloned())
        .filter(|v| !v.is_null())
        .unwrap_or_else(|| Value::String(now_rfc3339()));
    Stamp {
        resource_version: revision,
        generation,
        created,
    }
}

/// The store-managed metadata a store sets on an object it writes ([`stamp`]), kept apart
/// from the object: applying it to an object shared with the desired set (`Arc`) copies the
/// whole object, which a store that keeps the text it writes (SQLite, etcd) does not need to
/// do to write it ([`Stamp::text`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Stamp {
    /// `metadata.resourceVersion` (a decimal string when stored); `None`: left out.
    pub resource_version: Option<u64>,
    /// `metadata.generation`.
    pub generation: u64,
    /// `metadata.creationTimestamp` (an RFC 3339 string).
    pub created: Value,
}

impl Stamp {
    /// `object` with this metadata set (a copy of the object when it is shared).
    pub fn apply(&self, mut object: Object) -> Object {
        let meta = object.metadata_mut();
        match self.resource_version {
            Some(rv) => meta.insert("resourceVersion".into(), Value::String(rv.to_string())),
            None => meta.remove("resourceVersion"),
        };
        meta.insert("generation".into(), Value::from(self.generation));
        meta.insert("creationTimestamp".into(), self.created.clone());
        object
    }

    /// The JSON text of [`Self::apply`] of `object`, written from the object in place (no
    /// copy of it): the same fields; within `metadata`, the store's fields take the place of
    /// those present and the others follow.
    pub fn text(&self, object: &Object) -> String {
        use serde::ser::{SerializeMap, Serializer};
        struct Top<'a>(&'a serde_json::Map<String, Value>, &'a Stamp);
        struct Meta<'a>(&'a serde_json::Map<String, Value>, &'a Stamp);
        impl serde::Serialize for Top<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                let mut m = s.serialize_map(None)?;
                for (k, v) in self.0 {
                    match v {
                        Value::Object(meta) if k == "metadata" => {
                            m.serialize_entry(k, &Meta(meta, self.1))?
                        }
                        _ => m.serialize_entry(k, v)?,
                    }
                }
                m.end()
            }
        }
        impl serde::Serialize for Meta<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                let rv = self.1.resource_version.map(|rv| rv.to_string());
                let mut m = s.serialize_map(None)?;
                // Which of the store's fields the mapping has, seen on the way (looking them
                // up after, each hashed, was a quarter of this serialization).
                let (mut had_rv, mut had_generation, mut had_created) = (false, false, false);
                for (k, v) in self.0 {
                    match k.as_str() {
                        "resourceVersion" => {
                            had_rv = true;
                            if let Some(rv) = &rv {
                                m.serialize_entry(k, rv)?
                            }
                        }
                        "generation" => {
                            had_generation = true;
                            m.serialize_entry(k, &self.1.generation)?
                        }
                        "creationTimestamp" => {
                            had_created = true;
                            m.serialize_entry(k, &self.1.created)?
                        }
                        _ => m.serialize_entry(k, v)?,
                    }
                }
                if let Some(rv) = &rv
                    && !had_rv
                {
                    m.serialize_entry("resourceVersion", rv)?;
                }
                if !had_generation {
                    m.serialize_entry("generation", &self.1.generation)?;
                }
                if !had_created {
                    m.serialize_entry("creationTimestamp", &self.1.created)?;
                }
                m.end()
            }
        }
        if !matches!(object.get("metadata"), Some(Value::Object(_))) {
            // No metadata mapping to write into (not a valid object): as applied.
            return self.apply(object.clone()).to_json();
        }
        // Maps of JSON values always serialize.
        serde_json::to_string(&Top(object.as_map(), self)).unwrap_or_default()
    }

    /// [`Self::text`] of `object` (the same bytes), made from `json`, the object's JSON made
    /// already: the store's fields put in front of the brace that closes `metadata`, when the
    /// mapping has none of them (a declared object never does); else [`Self::text`].
    pub fn text_from(&self, object: &Object, json: &ObjectJson) -> String {
        let meta = object.metadata();
        let set = ["resourceVersion", "generation", "creationTimestamp"];
        if set
            .iter()
            .any(|f| crate::object::field_of(meta, f).is_some())
        {
            return self.text(object);
        }
        let text = json.text.as_str();
        let (before, after) = (
            &text[json.start..json.meta_close],
            &text[json.meta_close..json.end],
        );
        let mut out = Vec::with_capacity(json.end - json.start + 96);
        out.extend_from_slice(before.as_bytes());
        // `"name":value`, each after a comma unless first in an empty mapping.
        fn field(out: &mut Vec<u8>, first: &mut bool, name: &str, value: &impl serde::Serialize) {
            if !std::mem::take(first) {
                out.push(b',');
            }
            out.push(b'"');
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b"\":");
            // A string, a number or a JSON value always serializes.
            let _ = serde_json::to_writer(&mut *out, value);
        }
        let mut first = before.ends_with('{');
        if let Some(rv) = self.resource_version {
            field(&mut out, &mut first, "resourceVersion", &rv.to_string());
        }
        field(&mut out, &mut first, "generation", &self.generation);
        field(&mut out, &mut first, "creationTimestamp", &self.created);
        out.extend_from_slice(after.as_bytes());
        // Text around the JSON of a string, a number and a JSON value: UTF-8.
        String::from_utf8(out).unwrap_or_else(|_| self.text(object))
    }
}

/// An object's compact JSON made already, a span of a shared text (the new inventory
/// record's, whose entries are the desired set's objects as its digest wrote them, issue 18),
/// with where its `metadata` mapping closes: what [`Stamp::text_from`] puts a store's fields
/// into instead of serializing the object again. Serializing each created object took the
/// thread that makes SQLite's rows 35 ms of a cold sync of 10,000 objects, longer than the
/// inserts it feeds.
#[derive(Clone)]
pub struct ObjectJson {
    text: Arc<String>,
    start: usize,
    end: usize,
    /// The byte of `text` that closes `metadata` (`}`), within `start..end`.
    meta_close: usize,
}

impl fmt::Debug for ObjectJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The span only: the text may hold a Secret's data.
        f.debug_struct("ObjectJson")
            .field("start", &self.start)
            .field("end", &self.end)
            .finish_non_exhaustive()
    }
}

impl ObjectJson {
    /// The span `start..end` of `text`, an object's JSON whose `metadata` mapping closes at
    /// `meta_close` (as [`Object::write_json_marked`] gives it, offset alike). `None` when
    /// that does not hold of the text: out of bounds, not at character boundaries, or no `}`
    /// at `meta_close`. The caller vouches that the span is the JSON of the object it goes
    /// with ([`Write::Put::json`]).
    pub(crate) fn new(
        text: Arc<String>,
        start: usize,
        end: usize,
        meta_close: usize,
    ) -> Option<Self> {
        let fits = start < meta_close
            && meta_close + 1 < end
            && end <= text.len()
            && text.is_char_boundary(start)
            && text.is_char_boundary(end)
            && text.as_bytes()[meta_close] == b'}'
            && text.as_bytes()[start] == b'{'
            && text.as_bytes()[end - 1] == b'}';
        fits.then_some(ObjectJson {
            text,
            start,
            end,
            meta_close,
        })
    }
}

/// An object as a store wrote it ([`Committed::stored`]): either the stored object itself, or
/// the object given with the [`Stamp`] the store set on it, not applied, so that a commit of
/// 10,000 objects shared with the desired set does not copy each one (the copy is made when
/// asked for, [`Stored::object`], one at a time).
#[derive(Clone, Debug)]
pub struct Stored {
    object: Object,
    stamp: Option<Stamp>,
    /// The key, when the store had it at hand (else read from the object when asked).
    key: Option<ObjectKey>,
}

impl Stored {
    /// `object` given with the metadata the store set on it, not yet applied.
    pub fn stamped(object: Object, stamp: Stamp) -> Self {
        Stored {
            object,
            stamp: Some(stamp),
            key: None,
        }
    }

    /// This, with `key` (the object's own, as the store wrote it) kept for [`Self::key`], so
    /// that a commit of 10,000 objects does not read each one's identity fields again.
    pub(crate) fn with_key(mut self, key: ObjectKey) -> Self {
        debug_assert!(key == self.object.key());
        self.key = Some(key);
        self
    }

    /// The object's key.
    pub fn key(&self) -> ObjectKey {
        match &self.key {
            Some(k) => k.clone(),
            None => self.object.key(),
        }
    }

    /// `metadata.resourceVersion` as stored.
    pub fn resource_version(&self) -> Option<u64> {
        match &self.stamp {
            Some(st) => st.resource_version,
            None => self.object.resource_version(),
        }
    }

    /// `metadata.generation` as stored (0 when absent).
    pub fn generation(&self) -> u64 {
        match &self.stamp {
            Some(st) => st.generation,
            None => self.object.generation(),
        }
    }

    /// The stored object, the store's metadata applied (a copy when it was kept apart).
    pub fn object(&self) -> std::borrow::Cow<'_, Object> {
        match &self.stamp {
            None => std::borrow::Cow::Borrowed(&self.object),
            Some(st) => std::borrow::Cow::Owned(st.apply(self.object.clone())),
        }
    }

    /// The stored object, the store's metadata applied.
    pub fn into_object(self) -> Object {
        match self.stamp {
            None => self.object,
            Some(st) => st.apply(self.object),
        }
    }

    /// The object's fields outside what the store sets (`metadata.resourceVersion`,
    /// `generation`, `creationTimestamp`, which may be missing here): its kind, spec, status.
    pub fn unstamped(&self) -> &Object {
        &self.object
    }

    /// Sets `metadata.resourceVersion` (etcd, once its transaction committed).
    #[cfg(feature = "etcd")]
    pub(crate) fn set_resource_version(&mut self, rv: u64) {
        match &mut self.stamp {
            Some(st) => st.resource_version = Some(rv),
            None => {
                self.object
                    .metadata_mut()
                    .insert("resourceVersion".into(), Value::String(rv.to_string()));
            }
        }
    }
}

impl From<Object> for Stored {
    /// An object stored as it is (its metadata already set).
    fn from(object: Object) -> Self {
        Stored {
            object,
            stamp: None,
            key: None,
        }
    }
}

/// What [`stamp_record`] needs of an old record, from its stored text: its
/// `metadata.creationTimestamp` and `metadata.generation` (the rest is skipped, not built);
/// `None` when the text is not a JSON object.
pub(crate) fn record_meta_of(text: &str) -> Option<(Option<String>, Option<u64>)> {
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(default)]
        metadata: Meta,
    }
    #[derive(Default, serde::Deserialize)]
    struct Meta {
        #[serde(default, rename = "creationTimestamp")]
        created: Option<String>,
        #[serde(default)]
        generation: Option<u64>,
    }
    let head: Head = serde_json::from_str(text).ok()?;
    Some((head.metadata.created, head.metadata.generation))
}

/// [`stamp`] for driftless's own records (the reserved group), from what a backend read of the
/// old record's metadata alone (`old`: its `creationTimestamp` and `generation`, when there is
/// one): records are megabytes (an inventory or status of 10,000 objects), and decoding the old
/// one to compare it would cost more than the write. Its `generation` is kept (nothing reads a
/// record's generation); `creationTimestamp` kept, or now.
pub(crate) fn stamp_record(
    old: Option<(Option<String>, Option<u64>)>,
    mut new: Object,
    revision: u64,
) -> Object {
    let (created, generation) = old.unwrap_or((None, None));
    let meta = new.metadata_mut();
    meta.insert(
        "resourceVersion".into(),
        Value::String(revision.to_string()),
    );
    meta.insert(
        "generation".into(),
        Value::from(generation.unwrap_or(1).max(1)),
    );
    meta.insert(
        "creationTimestamp".into(),
        Value::String(created.unwrap_or_else(now_rfc3339)),
    );
    new
}

/// Rejects a transaction that writes one key twice (its outcome would depend on order); gives
/// each write's key, in order, for the backend to reuse.
pub(crate) fn check_distinct(writes: &[Write]) -> Result<Vec<ObjectKey>> {
    let mut seen = Distinct::with_capacity(writes.len());
    writes.iter().map(|w| seen.add(w)).collect()
}

/// The keys of a transaction's writes seen so far ([`check_distinct`], one write at a time).
pub(crate) struct Distinct(crate::object::KeySet);

impl Distinct {
    /// None seen yet, with room for `n` keys.
    pub(crate) fn with_capacity(n: usize) -> Self {
        Distinct(crate::object::KeySet::with_capacity_and_hasher(
            n,
            Default::default(),
        ))
    }

    /// `write`'s key, or the conflict of a second write of a key.
    pub(crate) fn add(&mut self, write: &Write) -> Result<ObjectKey> {
        let key = write.key();
        if !self.0.insert(key.clone()) {
            return Err(Error::Conflict {
                key: Box::new(key),
                expected: "one write per key in a transaction".into(),
                found: "two writes".into(),
            });
        }
        Ok(key)
    }
}

/// Parses a stored value.
pub(crate) fn decode(key: &ObjectKey, body: &str) -> Result<Object> {
    let value = crate::object::parse_json_compact(body).map_err(|e| Error::Corrupt {
        key: key.clone(),
        source: Box::new(e),
    })?;
    Object::from_value(value).map_err(|e| Error::Corrupt {
        key: key.clone(),
        source: Box::new(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The kept text of the current second is the time now, and moves with the clock.
    #[test]
    fn now_is_the_current_second_and_moves_with_it() {
        let second = |t: SystemTime| humantime::format_rfc3339_seconds(t).to_string();
        let before = SystemTime::now();
        let first = now_rfc3339();
        let after = SystemTime::now();
        assert!(first == second(before) || first == second(after), "{first}");
        // Asked again until the clock's second changes: the text follows it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        loop {
            let before = SystemTime::now();
            let now = now_rfc3339();
            let after = SystemTime::now();
            assert!(now == second(before) || now == second(after), "{now}");
            if now != first {
                assert!(now > first, "{now} after {first}");
                break;
            }
            assert!(std::time::Instant::now() < deadline, "stuck at {first}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    #[test]
    fn a_record_made_into_text_in_its_own_buffer_is_its_text() {
        let fields = json!({"entries": [{"a": 1}, {"b": "x".repeat(5000)}], "n": null});
        let record = RecordText::new("Inventory", "app", "spec", &fields).unwrap();
        let empty = RecordText {
            kind: "Inventory".into(),
            name: "empty".into(),
            members: Arc::new(String::new()),
        };
        // Heads of every size, one longer than the room kept for it.
        let mut heads = vec![record.head()];
        let mut stamped = record.head();
        stamped
            .metadata_mut()
            .insert("resourceVersion".into(), json!("12"));
        heads.push(stamped);
        let mut long = record.head();
        long.metadata_mut().insert(
            "annotations".into(),
            json!({"a": "y".repeat(HEAD_ROOM * 2)}),
        );
        heads.push(long);
        for head in &heads {
            let text = record.text(head);
            let parsed: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(parsed["spec"], fields);
            let head_value: Value = serde_json::from_str(&head.to_json()).unwrap();
            assert_eq!(parsed["metadata"], head_value["metadata"]);
            // Alone (its buffer reused) and shared with a clone (copied): the same text.
            let alone = RecordText::new("Inventory", "app", "spec", &fields).unwrap();
            assert_eq!(alone.into_text(head), text);
            assert_eq!(record.clone().into_text(head), text);
            assert_eq!(empty.clone().into_text(head), empty.text(head));
            assert_eq!(empty.clone().into_text(head), head.to_json());
        }
    }

    /// A record compressed in two parts (its own fields ahead of the stamped head) expands to
    /// its whole text, as one gzip of it would.
    #[test]
    fn a_record_compressed_in_two_parts_expands_to_its_text() {
        let fields = json!({"entries": [{"a": 1}, {"b": "x".repeat(5000)}]});
        let record = RecordText::new("Inventory", "app", "spec", &fields).unwrap();
        let mut head = record.head();
        head.metadata_mut()
            .insert("resourceVersion".into(), json!("12"));
        let front = RecordText::head_before_fields(&head).unwrap();
        let mut gz = gzip::compress(front.as_bytes(), 1);
        gz.extend(record.gzip_after_head(1).unwrap());
        let text = gzip::expand(&gz, 1 << 20).unwrap();
        assert_eq!(text, record.clone().into_text(&head));
        let empty = RecordText::with_json("Inventory", "e", "spec", |out| {
            out.extend_from_slice(b"{}");
            Ok(())
        })
        .unwrap();
        assert!(empty.gzip_after_head(1).is_some());
        let none = RecordText {
            kind: "Inventory".into(),
            name: "none".into(),
            members: Arc::new(String::new()),
        };
        assert!(
            none.gzip_after_head(1).is_none(),
            "its text is the head alone"
        );
    }

    #[test]
    fn a_stamp_written_as_text_is_the_stamp_applied() {
        let cases = [
            // No store metadata yet; metadata.name first, the rest after.
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}, "data": {"k": "v"}}),
            // Old store metadata in place (replaced where it stands), in another order.
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"creationTimestamp": "x", "name": "a", "resourceVersion": "3", "generation": 9}, "data": {}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "generation": 2}}),
        ];
        for case in cases {
            let object = Object::from_value(case.clone()).unwrap();
            for rv in [Some(12), None] {
                let stamp = Stamp {
                    resource_version: rv,
                    generation: 4,
                    created: json!("2026-12-03T00:00:00Z"),
                };
                let text: Value = serde_json::from_str(&stamp.text(&object)).unwrap();
                let applied = stamp.apply(object.clone());
                assert_eq!(text, Value::from(applied.clone()), "{case} {rv:?}");
                assert_eq!(applied.resource_version(), rv);
                assert_eq!(applied.generation(), 4);
                let stored = Stored::stamped(object.clone(), stamp.clone());
                assert_eq!(stored.resource_version(), rv);
                assert_eq!(*stored.object(), applied);
                assert_eq!(stored.key(), object.key());
                // The object given is not touched.
                assert_eq!(Value::from(object.clone()), case);
            }
        }
    }

    /// A stamp put into an object's JSON made already is the same text, byte for byte, as the
    /// object serialized with it: with and without a resourceVersion, with store fields in the
    /// metadata already (then serialized), with text to escape, and at an offset of a longer
    /// text shared with others.
    #[test]
    fn a_stamp_put_into_json_made_already_is_the_stamp_written_as_text() {
        let cases = [
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}, "data": {"k": "v"}}),
            json!({"metadata": {"name": "a\"\u{e9}\n", "labels": {"x/y": "}{"}}, "apiVersion": "v1", "kind": "ConfigMap"}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"creationTimestamp": "x", "name": "a", "resourceVersion": "3"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "generation": 2}, "data": {"metadata": "}"}}),
        ];
        let objects: Vec<Object> = cases.iter().map(|c| obj(c.clone())).collect();
        let mut text = b"[junk,".to_vec();
        let mut spans = Vec::new();
        for o in &objects {
            let start = text.len();
            let close = o.write_json_marked(&mut text).unwrap().unwrap();
            spans.push((start, text.len(), close));
            text.push(b',');
        }
        let text = Arc::new(String::from_utf8(text).unwrap());
        for (o, (start, end, close)) in objects.iter().zip(spans) {
            assert_eq!(
                &text[start..end],
                o.to_json(),
                "the same bytes as write_json"
            );
            let json = ObjectJson::new(text.clone(), start, end, close).unwrap();
            for (rv, created) in [
                (Some(12), json!("2026-12-03T00:00:00Z")),
                (None, json!("t\"")),
            ] {
                let stamp = Stamp {
                    resource_version: rv,
                    generation: 4,
                    created,
                };
                assert_eq!(stamp.text_from(o, &json), stamp.text(o), "{o:?} {rv:?}");
            }
        }
    }

    /// A span that is not an object's JSON with its metadata's closing brace is refused: out
    /// of bounds, inside a character, the brace elsewhere.
    #[test]
    fn json_made_already_is_refused_unless_it_is_shaped_as_given() {
        let text = Arc::new("{\"metadata\":{\"name\":\"\u{e9}\"}}".to_string());
        let close = text.len() - 2;
        assert!(ObjectJson::new(text.clone(), 0, text.len(), close).is_some());
        for (start, end, close) in [
            (0, text.len() + 1, close),
            (0, text.len(), close - 1),
            (1, text.len(), close),
            (0, text.len() - 1, close),
            (0, text.len(), text.len() - 1),
            (0, text.len(), 0),
        ] {
            assert!(
                ObjectJson::new(text.clone(), start, end, close).is_none(),
                "{start}..{end} at {close}"
            );
        }
        // Its debug form shows no text (a Secret's data may be in it).
        let shown = format!("{:?}", ObjectJson::new(text.clone(), 0, text.len(), close));
        assert!(!shown.contains("name"), "{shown}");
    }

    fn obj(v: Value) -> Object {
        Object::from_value(v).unwrap()
    }

    #[test]
    fn generation_moves_only_on_changes_outside_metadata_and_status() {
        let a = obj(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "1"}}),
        );
        let s1 = stamp(None, a.clone(), 5);
        assert_eq!(s1.generation(), 1);
        assert_eq!(s1.resource_version(), Some(5));
        let mut relabeled = s1.clone();
        relabeled
            .metadata_mut()
            .insert("labels".into(), json!({"x": "y"}));
        relabeled
            .as_map_mut()
            .insert("status".into(), json!({"ok": true}));
        let s2 = stamp(Some(&s1), relabeled, 6);
        assert_eq!(s2.generation(), 1);
        assert_eq!(
            s2.metadata()["creationTimestamp"],
            s1.metadata()["creationTimestamp"]
        );
        let mut changed = s2.clone();
        changed
            .as_map_mut()
            .insert("data".into(), json!({"k": "2"}));
        assert_eq!(stamp(Some(&s2), changed, 7).generation(), 2);
        // A field added or taken away is a change; the same fields in another order are not.
        let m = json!({"name": "a"});
        let base = obj(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": m, "data": {"k": "1"}, "binaryData": {}}),
        );
        let more = obj(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": m, "data": {"k": "1"}, "binaryData": {}, "x": 1}),
        );
        let fewer = obj(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": m, "data": {"k": "1"}}),
        );
        let reordered = obj(
            json!({"binaryData": {}, "data": {"k": "1"}, "metadata": m, "kind": "ConfigMap", "apiVersion": "v1"}),
        );
        assert!(spec_changed(&base, &more) && spec_changed(&more, &base));
        assert!(spec_changed(&base, &fewer) && spec_changed(&fewer, &base));
        assert!(!spec_changed(&base, &reordered));
    }

    #[test]
    fn preconditions_describe_conflicts() {
        let key = ObjectKey::new("", "ConfigMap", "d", "a");
        let o = stamp(
            None,
            obj(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "d"}}),
            ),
            3,
        );
        assert!(
            Precondition::ResourceVersion(3)
                .check(&key, Some(&o))
                .is_ok()
        );
        let err = Precondition::ResourceVersion(2)
            .check(&key, Some(&o))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "conflict on ConfigMap d/a: expected resourceVersion 2, found resourceVersion 3"
        );
        assert!(Precondition::Absent.check(&key, Some(&o)).is_err());
        assert!(Precondition::Absent.check(&key, None).is_ok());
        assert!(Precondition::Any.check(&key, None).is_ok());
    }

    #[test]
    fn reserved_objects_are_listed_only_when_asked_for() {
        let k = ObjectKey::new(crate::object::RESERVED_GROUP, "Inventory", "", "app");
        assert!(!Selector::default().matches(&k));
        assert!(
            Selector {
                group: Some(crate::object::RESERVED_GROUP.into()),
                ..Default::default()
            }
            .matches(&k)
        );
    }
}
