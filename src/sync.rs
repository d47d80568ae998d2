//! Sync: execute a plan against a store, with compare-and-swap, retries and prune.
//!
//! One sync reads the app's inventory and the live objects, plans (see [`crate::diff`]), and
//! commits every write, the new inventory included, as one store transaction. When a
//! compare-and-swap precondition fails (someone wrote an object between the read and the
//! commit), nothing was written: the sync reads again and plans again. An object whose write
//! failed its compare twice is *contested* (another writer is changing it right now): the next
//! attempt leaves it as it is (its step is skipped, it stays out of sync, its inventory entry is
//! kept), so one busy object never fails the pass for the others; the change feed brings it
//! back for a revert, where the fight rule throttles it. Up to [`MAX_CONTESTED`] objects are
//! set aside this way; conflicts on the inventory or ownership records, or beyond that many
//! objects, are retried [`CONFLICT_RETRIES`] times, then the sync gives up with
//! [`Error::Conflict`] and the caller retries later.
//!
//! The inventory is the record of what this app applied: per object, the declaration as it was
//! last applied. It is the basis of pruning (only inventory objects are ever deleted) and of the
//! three-way diff. An object another app owns is not applied here: it is reported as an
//! ownership conflict on this app, never fought over, and never pruned.
//!
//! Who owns what is one record every claimant writes, the [`Ownership`] index: a sync that
//! claims objects new to its app, or releases objects, rewrites it with compare-and-swap in the
//! transaction of its inventory. Two apps claiming one object at once cannot both win: the
//! second commit fails its compare, plans again, and finds the object owned. (A claim must not
//! hang on writing the object: an object that is already as declared is not written.)

mod config;
mod verified;
pub use config::{RetryConfig, SyncConfig, TargetConfig};
pub use verified::{
    AheadText, EntriesAhead, EntrySpan, Persisted, VERIFIED_KIND, desired_digest,
    desired_digest_ahead, desired_digest_here,
};

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde_json::{Map, Value};

use crate::diff::{self, Action, Plan, PlanOptions};
use crate::ignore::{self, IgnoreRule};
use crate::object::{Object, ObjectKey, RESERVED_GROUP, Revision};
use crate::store::{self, Precondition, RecordText, Selector, Store, Write};

/// Kind of the inventory records.
pub const INVENTORY_KIND: &str = "Inventory";

/// How many times a sync re-reads and re-plans after a compare-and-swap conflict on a record
/// it cannot set aside (the inventory, the ownership index), or on an object once
/// [`MAX_CONTESTED`] are set aside.
pub const CONFLICT_RETRIES: usize = 5;

/// How many contested objects (whose write failed its compare-and-swap because another writer
/// changed them during the sync) one sync sets aside and leaves out of sync, to commit the rest.
pub const MAX_CONTESTED: usize = 64;

/// The skip reason of a contested object's step.
pub const CONTESTED: &str = "contested: another writer changed it during this sync";

/// Errors from a sync.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store failed while reading or writing.
    #[error("store failed during sync")]
    Store(#[source] store::Error),
    /// Other writers kept changing the objects between read and commit.
    #[error("gave up after {attempts} compare-and-swap conflicts")]
    Conflict {
        /// Attempts made.
        attempts: usize,
        /// The last conflict.
        #[source]
        source: store::Error,
    },
    /// Another process applied a revision to this app after the caller last looked (its
    /// [`Request::inventory`] copy names another revision, and the stored one is neither that
    /// nor the one being applied): applying the caller's revision could roll the app back to an
    /// older commit. Nothing was written; adopt the stored inventory, fetch again, then sync.
    #[error("another process applied revision {} to app {app} since it was last read; fetch again before applying", found.as_ref().map_or("(none)", |r| r.0.as_str()))]
    Superseded {
        /// The app.
        app: String,
        /// The revision the stored inventory names.
        found: Option<Revision>,
    },
    /// An inventory record does not parse.
    #[error("inventory of app {app} is unreadable")]
    Inventory {
        /// The app.
        app: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Result alias for sync.
pub type Result<T> = std::result::Result<T, Error>;

/// What an app applied: the last-applied copy of every object, and the revision they came from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Inventory {
    /// The app.
    pub app: String,
    /// The revision last applied (the revision in force).
    pub revision: Option<Revision>,
    /// What the revision was read from and how (repository, path, namespace): a change of
    /// these in the config makes the same revision a new desired set. `None` for records that
    /// predate it.
    pub source: Option<String>,
    /// Last-applied declarations by key.
    pub entries: BTreeMap<ObjectKey, Object>,
    /// Entries the revision no longer declares, kept because their delete was held back
    /// (`prune: false`, or an empty revision without `allowEmpty`): still owned (a later sync
    /// with pruning deletes them), but not part of the desired set in force. Stored as
    /// `spec.retained`, a list of `[group, kind, namespace, name]`.
    pub retained: BTreeSet<ObjectKey>,
    /// resourceVersion of the stored record, for compare-and-swap; `None` when not stored yet.
    pub resource_version: Option<u64>,
}

impl Inventory {
    /// The key of an app's inventory record.
    pub fn record_key(app: &str) -> ObjectKey {
        ObjectKey::new(RESERVED_GROUP, INVENTORY_KIND, "", app)
    }

    /// The record to store, as text made from the entries in place (no copy of them; what
    /// the sync writes, [`Write::PutRecord`]): `spec.revision` and `spec.source` (strings or
    /// null), `spec.entries` (the last-applied objects, in key order) and, when any,
    /// `spec.retained` (`[group, kind, namespace, name]` each).
    ///
    /// # Errors
    ///
    /// [`Error::Inventory`] when serializing fails (maps of JSON values do not).
    pub fn to_record_text(&self) -> Result<RecordText> {
        self.to_record_text_with(None)
    }

    /// [`Self::to_record_text`] with the entries' text made already (`entries`: each entry's
    /// compact JSON in key order, joined by commas, as [`EntriesAhead`] holds it), written as
    /// it is: the record is made in that buffer ([`RecordText::around`]); `None` makes them.
    ///
    /// # Errors
    ///
    /// As [`Self::to_record_text`].
    pub fn to_record_text_with(&self, entries: Option<Vec<u8>>) -> Result<RecordText> {
        self.record_text(entries).map(|(record, _)| record)
    }

    /// [`Self::to_record_text_with`] the entries' text made ahead, and where that text begins
    /// in the record's own fields (`RecordText::object_json`).
    ///
    /// # Errors
    ///
    /// As [`Self::to_record_text`].
    pub fn to_record_text_around(&self, entries: Vec<u8>) -> Result<(RecordText, usize)> {
        self.record_text(Some(entries))
            .map(|(record, at)| (record, at.unwrap_or(0)))
    }

    /// The record, around `entries` when given (then with where they begin).
    fn record_text(&self, entries: Option<Vec<u8>>) -> Result<(RecordText, Option<usize>)> {
        #[derive(serde::Serialize)]
        struct Head<'a> {
            revision: Option<&'a str>,
            source: Option<&'a str>,
        }
        let head = Head {
            revision: self.revision.as_ref().map(|r| r.0.as_str()),
            source: self.source.as_deref(),
        };
        let retained: Option<Vec<[&str; 4]>> = (!self.retained.is_empty()).then(|| {
            self.retained
                .iter()
                .map(|k| [k.group(), k.kind(), k.namespace(), k.name()])
                .collect()
        });
        // `{"revision":…,"source":…,"entries":[…],"retained":[…]}`, the entries made on all
        // cores ([`write_entries`]) between the parts serde writes.
        let before = |out: &mut Vec<u8>| {
            serde_json::to_writer(&mut *out, &head)?;
            out.pop(); // the head's closing brace: the spec goes on
            out.extend_from_slice(b",\"entries\":[");
            Ok(())
        };
        let after = |out: &mut Vec<u8>| {
            out.push(b']');
            if let Some(retained) = &retained {
                out.extend_from_slice(b",\"retained\":");
                serde_json::to_writer(&mut *out, retained)?;
            }
            out.push(b'}');
            Ok(())
        };
        match entries {
            // Made ahead: the record is made around them, in their buffer.
            Some(text) => {
                RecordText::around(INVENTORY_KIND, &self.app, "spec", before, text, after)
                    .map(|(record, at)| (record, Some(at)))
            }
            None => RecordText::with_json(INVENTORY_KIND, &self.app, "spec", |out| {
                before(out)?;
                write_entries(&self.entries, out)?;
                after(out)
            })
            .map(|record| (record, None)),
        }
        .map_err(|e| Error::Inventory {
            app: self.app.clone(),
            source: Box::new(e),
        })
    }

    /// Takes each entry equal to the object under its key in `desired` (the same fields in
    /// the same order, [`Object::equal_in_order`]) as that object (shared, `Arc`), dropping
    /// its own copy: an inventory read at start-up beside the same
    /// revision parsed again holds one copy of each object instead of two. Gives how many were
    /// shared. Nothing read from the inventory changes (the objects are equal).
    pub fn share_with(&mut self, desired: &BTreeMap<ObjectKey, Object>) -> usize {
        let mut shared = 0;
        for (key, entry) in &mut self.entries {
            if let Some(d) = desired.get(key)
                && !d.same(entry)
                && d.equal_in_order(entry)
            {
                *entry = d.clone();
                shared += 1;
            }
        }
        shared
    }

    /// The desired set this inventory was applied from: its entries without the retained
    /// ones.
    pub fn desired(&self) -> BTreeMap<ObjectKey, Object> {
        self.entries
            .iter()
            .filter(|(k, _)| !self.retained.contains(*k))
            .map(|(k, o)| (k.clone(), o.clone()))
            .collect()
    }

    /// Reads a record back, taking it apart (no copy of the entries).
    ///
    /// # Errors
    ///
    /// [`Error::Inventory`] when the record is not in the shape [`Self::to_record_text`]
    /// writes: `spec` not a mapping, `spec.entries` missing or not a list, an entry that is
    /// not an object, `spec.revision` or `spec.source` neither a string nor null,
    /// `spec.retained` not a list of four strings each. A damaged record is never read as
    /// an inventory with fewer entries (what it owns decides what a sync prunes). The
    /// messages name fields and positions, never values (an entry may be a Secret).
    pub fn from_record(app: &str, obj: Object) -> Result<Self> {
        let bad = |why: String| Error::Inventory {
            app: app.to_string(),
            source: why.into(),
        };
        let resource_version = obj.resource_version();
        let mut map = Value::from(obj);
        let spec = map.get_mut("spec").map(Value::take).unwrap_or(Value::Null);
        let Value::Object(mut spec) = spec else {
            return Err(bad(format!(
                "spec is {}, not a mapping",
                crate::object::type_name(&spec)
            )));
        };
        let text = |field: &str, v: Option<Value>| match v {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(bad(format!(
                "spec.{field} is {}, not a string",
                crate::object::type_name(&v)
            ))),
        };
        let revision = text("revision", spec.remove("revision"))?.map(Revision);
        let source = text("source", spec.remove("source"))?;
        let list = match spec.remove("entries") {
            Some(Value::Array(list)) => list,
            Some(v) => {
                return Err(bad(format!(
                    "spec.entries is {}, not a list",
                    crate::object::type_name(&v)
                )));
            }
            None => return Err(bad("spec.entries is missing".into())),
        };
        let mut entries = BTreeMap::new();
        for v in list {
            let o = Object::from_value(v).map_err(|e| Error::Inventory {
                app: app.to_string(),
                source: Box::new(e),
            })?;
            entries.insert(o.key(), o);
        }
        let mut retained = BTreeSet::new();
        match spec.remove("retained") {
            None | Some(Value::Null) => {}
            Some(Value::Array(list)) => {
                for (i, v) in list.iter().enumerate() {
                    let parts: Vec<&str> = v
                        .as_array()
                        .map(|a| a.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    let [group, kind, namespace, name] = parts[..] else {
                        return Err(bad(format!(
                            "spec.retained[{i}] is not four strings (group, kind, namespace, name)"
                        )));
                    };
                    retained.insert(ObjectKey::new(group, kind, namespace, name));
                }
            }
            Some(v) => {
                return Err(bad(format!(
                    "spec.retained is {}, not a list",
                    crate::object::type_name(&v)
                )));
            }
        }
        Ok(Self {
            app: app.to_string(),
            revision,
            source,
            entries,
            retained,
            resource_version,
        })
    }

    /// Loads an app's inventory (empty when it has none yet).
    ///
    /// # Errors
    ///
    /// [`Error::Store`], [`Error::Inventory`].
    pub async fn load(store: &dyn Store, app: &str) -> Result<Self> {
        Self::load_sharing(store, app, None).await
    }

    /// [`Self::load`], each entry whose stored text is exactly the text of the object under
    /// its key in `desired` taken as that object (shared, `Arc`) instead of decoded: after a
    /// sync, the inventory lists the declarations applied, so a new process that parsed the
    /// same revision holds one copy of each instead of two (10,000 objects: tens of MB). Equal
    /// text is equal JSON, so nothing read differs from a decode.
    ///
    /// # Errors
    ///
    /// As [`Self::load`].
    pub async fn load_sharing(
        store: &dyn Store,
        app: &str,
        desired: Option<&BTreeMap<ObjectKey, Object>>,
    ) -> Result<Self> {
        let key = Self::record_key(app);
        match store.get_json(&key).await.map_err(Error::Store)? {
            Some((text, rv)) => match Self::from_text(app, &text, rv, desired) {
                Some(inventory) => inventory,
                // Not the shape this version writes: read as an object, for its errors.
                None => Self::from_record(app, store::decode(&key, &text).map_err(Error::Store)?),
            },
            None => Ok(Self {
                app: app.to_string(),
                ..Self::default()
            }),
        }
    }

    /// Reads a record's text (the resourceVersion given apart): the record's frame without a
    /// JSON tree, then its entries on all cores ([`crate::par::map`]), each from its own slice
    /// of the text. `None` when the frame is not this shape (the caller reads it as
    /// [`Inventory::from_record`] does, for its errors); an entry that is not an object is
    /// [`Error::Inventory`].
    fn from_text(
        app: &str,
        text: &str,
        rv: u64,
        desired: Option<&BTreeMap<ObjectKey, Object>>,
    ) -> Option<Result<Self>> {
        #[derive(serde::Deserialize)]
        struct Record<'a> {
            #[serde(borrow)]
            spec: Spec<'a>,
        }
        #[derive(serde::Deserialize)]
        struct Spec<'a> {
            #[serde(default)]
            revision: Option<String>,
            #[serde(default)]
            source: Option<String>,
            // Required: a record without it is not read as empty (`from_record` says why).
            #[serde(borrow)]
            entries: Vec<&'a serde_json::value::RawValue>,
            #[serde(default)]
            retained: Vec<[String; 4]>,
        }
        let record: Record<'_> = serde_json::from_str(text).ok()?;
        let decoded = crate::par::map("inventory entries", &record.spec.entries, 512, |raw| {
            if let Some(same) = desired.and_then(|d| same_as_desired(raw.get(), d)) {
                return Ok(same);
            }
            // Decoded when first looked into: a no-op pass of a new process never does.
            Object::from_stored_text(raw.get())
        });
        let mut entries = BTreeMap::new();
        for o in decoded {
            match o {
                Ok(o) => {
                    entries.insert(o.key(), o);
                }
                Err(e) => {
                    return Some(Err(Error::Inventory {
                        app: app.to_string(),
                        source: e.into(),
                    }));
                }
            }
        }
        Some(Ok(Self {
            app: app.to_string(),
            revision: record.spec.revision.map(Revision),
            source: record.spec.source,
            entries,
            retained: record
                .spec
                .retained
                .into_iter()
                .map(|[group, kind, namespace, name]| ObjectKey::new(group, kind, namespace, name))
                .collect(),
            resource_version: Some(rv),
        }))
    }
}

/// The object of `desired` whose JSON text is exactly `text` (an inventory entry as stored),
/// found by the key read from the text's head; `None` when there is none or the text differs.
/// The comparison serializes the object against the text, stopping at the first difference,
/// and builds nothing.
fn same_as_desired(text: &str, desired: &BTreeMap<ObjectKey, Object>) -> Option<Object> {
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(rename = "apiVersion")]
        api_version: String,
        kind: String,
        metadata: Meta,
    }
    #[derive(serde::Deserialize)]
    struct Meta {
        name: String,
        #[serde(default)]
        namespace: String,
    }
    struct Compare<'a>(&'a [u8]);
    impl std::io::Write for Compare<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            match self.0.strip_prefix(buf) {
                Some(rest) => {
                    self.0 = rest;
                    Ok(buf.len())
                }
                None => Err(std::io::Error::other("differs")),
            }
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let head: Head = serde_json::from_str(text).ok()?;
    let group = head
        .api_version
        .rsplit_once('/')
        .map_or("", |(group, _)| group);
    let key = ObjectKey::new(
        group,
        &head.kind,
        &head.metadata.namespace,
        &head.metadata.name,
    );
    let object = desired.get(&key)?;
    let mut rest = Compare(text.as_bytes());
    (serde_json::to_writer(&mut rest, object.as_map()).is_ok() && rest.0.is_empty())
        .then(|| object.clone())
}

/// Appends the JSON of each entry, in key order, separated by commas (an array's items
/// without its brackets): made on all cores ([`crate::par::write_joined`]) a batch of 4,096 at
/// a time (bounded memory beside the record), in parts of 256, appended in order. The inventory's
/// entries were a tenth of a cold sync's single-core time when serialized one by one.
///
/// # Errors
///
/// A `serde_json` error when an entry does not serialize (maps of JSON values do).
fn write_entries(
    entries: &BTreeMap<ObjectKey, Object>,
    out: &mut Vec<u8>,
) -> std::result::Result<(), serde_json::Error> {
    let objects: Vec<&Object> = entries.values().collect();
    crate::par::write_joined("inventory text", &objects, out, |o, text| {
        o.write_json(text)
    })
}

/// Gives each [`Write::Put`] of a desired object (the very object, shared) its JSON in the new
/// inventory record ([`Write::Put::json`]): `spans` say where each of `desired`'s objects is,
/// in key order, in the text that begins at `at` of the record's own fields
/// ([`AheadText`]). One walk of both in key order; a write found out of order, or an object
/// without its metadata's place, is left to be serialized.
fn lend_json(
    writes: &mut [Write],
    desired: &BTreeMap<ObjectKey, Object>,
    spans: &[EntrySpan],
    record: &RecordText,
    at: usize,
) {
    if spans.len() != desired.len() {
        return;
    }
    let mut entries = desired.iter().zip(spans).peekable();
    for w in writes.iter_mut() {
        let Write::Put { object, json, .. } = w else {
            continue;
        };
        let key = object.key();
        while entries.next_if(|((k, _), _)| **k < key).is_some() {}
        let Some(((_, declared), span)) = entries.peek() else {
            break;
        };
        if let Some(meta_close) = span.meta_close
            && declared.same(object)
        {
            let at = |i: u32| at + i as usize;
            *json = record.object_json(at(span.start), at(span.end), at(meta_close));
        }
    }
}

/// True when `a` and `b` hold the same keys with the same objects (shared: [`Object::same`]).
fn same_objects(a: &BTreeMap<ObjectKey, Object>, b: &BTreeMap<ObjectKey, Object>) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((ka, oa), (kb, ob))| ka == kb && oa.same(ob))
}

/// Kind of the ownership index record (one record, named [`OWNERSHIP_NAME`]).
pub const OWNERSHIP_KIND: &str = "Ownership";
/// Name of the ownership index record.
pub const OWNERSHIP_NAME: &str = "objects";

/// The ownership index: every object some app owns, and that app. Stored as one record in the
/// reserved group (`spec.owners: [[group, kind, namespace, name, app], ...]`) that every
/// claimant rewrites with compare-and-swap; see the module documentation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ownership {
    /// Owner app by object key.
    pub owners: BTreeMap<ObjectKey, String>,
    /// resourceVersion of the stored record; `None` when there is none yet (the index is then
    /// built from the inventories and created by the first sync that claims or releases).
    pub resource_version: Option<u64>,
}

impl Ownership {
    /// The key of the index record.
    pub fn record_key() -> ObjectKey {
        ObjectKey::new(RESERVED_GROUP, OWNERSHIP_KIND, "", OWNERSHIP_NAME)
    }

    /// The record to store, as text made from the index in place (what a sync writes,
    /// [`Write::PutRecord`]): `spec.owners`, `[group, kind, namespace, name, app]` each, in key
    /// order. No JSON tree of it is built: at 100,000 objects that tree alone was 36 MB.
    ///
    /// # Errors
    ///
    /// [`Error::Inventory`] (app `*`) when serializing fails (lists of strings do not).
    pub fn to_record_text(&self) -> Result<RecordText> {
        #[derive(serde::Serialize)]
        struct Spec<'a> {
            owners: Owners<'a>,
        }
        struct Owners<'a>(&'a BTreeMap<ObjectKey, String>);
        impl serde::Serialize for Owners<'_> {
            fn serialize<S: serde::Serializer>(
                &self,
                s: S,
            ) -> std::result::Result<S::Ok, S::Error> {
                s.collect_seq(
                    self.0.iter().map(|(k, app)| {
                        [k.group(), k.kind(), k.namespace(), k.name(), app.as_str()]
                    }),
                )
            }
        }
        RecordText::new(
            OWNERSHIP_KIND,
            OWNERSHIP_NAME,
            "spec",
            &Spec {
                owners: Owners(&self.owners),
            },
        )
        .map_err(|e| Error::Inventory {
            app: "*".into(),
            source: Box::new(e),
        })
    }

    /// Reads the record back.
    ///
    /// # Errors
    ///
    /// [`Error::Inventory`] (app `*`) when an entry is not five strings.
    pub fn from_record(obj: &Object) -> Result<Self> {
        let bad = |why: String| Error::Inventory {
            app: "*".into(),
            source: why.into(),
        };
        let mut owners = BTreeMap::new();
        let list = obj
            .get("spec")
            .and_then(|s| s.get("owners"))
            .and_then(Value::as_array)
            .ok_or_else(|| bad("the ownership index has no spec.owners list".into()))?;
        for (i, entry) in list.iter().enumerate() {
            let parts: Vec<&str> = entry
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let [group, kind, namespace, name, app] = parts[..] else {
                return Err(bad(format!(
                    "spec.owners[{i}] is not five strings (group, kind, namespace, name, app)"
                )));
            };
            owners.insert(
                ObjectKey::new(group, kind, namespace, name),
                app.to_string(),
            );
        }
        Ok(Self {
            owners,
            resource_version: obj.resource_version(),
        })
    }

    /// Reads the index; when the store has none yet (written before it existed), builds it
    /// from every inventory (an object two inventories list goes to the first app by name).
    ///
    /// # Errors
    ///
    /// [`Error::Store`], [`Error::Inventory`].
    pub async fn load(store: &dyn Store) -> Result<Self> {
        if let Some(obj) = store.get(&Self::record_key()).await.map_err(Error::Store)? {
            return Self::from_record(&obj);
        }
        let listing = store
            .list(&Selector {
                group: Some(RESERVED_GROUP.into()),
                kind: Some(INVENTORY_KIND.into()),
                namespace: None,
            })
            .await
            .and_then(store::Listing::complete)
            .map_err(Error::Store)?;
        let mut owners = BTreeMap::new();
        for (key, obj) in listing.objects {
            let inv = Inventory::from_record(key.name(), obj)?;
            for k in inv.entries.into_keys() {
                owners.entry(k).or_insert_with(|| key.name().to_string());
            }
        }
        Ok(Self {
            owners,
            resource_version: None,
        })
    }

    /// The owner of `key` when it is an app other than `app`.
    pub fn other_owner(&self, key: &ObjectKey, app: &str) -> Option<&str> {
        self.owners
            .get(key)
            .map(String::as_str)
            .filter(|owner| *owner != app)
    }
}

/// What an earlier sync of the same desired set found already as declared: per object, the
/// live resourceVersion it compared with, and the inventory record version it held then. A
/// later sync given it ([`Request::verified`]) asks the store for the objects' current
/// resourceVersions ([`Store::versions`]) and neither reads nor plans those that have not moved:
/// an object is only ever changed by a write, and every write moves its resourceVersion, so
/// the same live version against the same declaration and inventory entry plans the same
/// (unchanged) step. Valid for one desired set only: the caller drops it when the revision in
/// force (or what it declares) changes; it is ignored when the inventory record has moved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verified {
    /// The inventory record's resourceVersion the entries hold for (`None`: none yet).
    pub inventory_rv: Option<u64>,
    /// Object → the live resourceVersion it was found as declared at.
    pub entries: crate::object::KeyMap<u64>,
}

impl Verified {
    /// Applies what a sync given this (or, after a [`VerifiedUpdate::reset`], nothing) found.
    pub fn apply(&mut self, update: VerifiedUpdate) {
        if update.reset {
            self.entries.clear();
        }
        self.inventory_rv = update.inventory_rv;
        // None to remove from an empty map (a cold sync moves them all): none hashed.
        if !self.entries.is_empty() {
            for k in update.moved {
                self.entries.remove(&k);
            }
        }
        self.entries.reserve(update.found.len());
        self.entries.extend(update.found);
    }

    /// How many objects it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when it holds none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// What a sync learnt for [`Verified`]: a change to apply to the copy it was given
/// ([`Verified::apply`]), so that a pass that finds nothing new copies nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifiedUpdate {
    /// The copy given was not used (none, or held for another inventory record): start anew.
    pub reset: bool,
    /// The inventory record's resourceVersion after the sync.
    pub inventory_rv: Option<u64>,
    /// Objects planned (or in conflict) that are no longer known as declared.
    pub moved: Vec<ObjectKey>,
    /// Objects found as declared, at their live resourceVersion.
    pub found: Vec<(ObjectKey, u64)>,
}

/// What to sync.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    /// The app.
    pub app: &'a str,
    /// The revision the desired set comes from.
    pub revision: &'a Revision,
    /// What it was read from (see [`Inventory::source`]).
    pub source: &'a str,
    /// The whole desired set of the app (namespaces defaulted).
    pub desired: &'a BTreeMap<ObjectKey, Object>,
    /// Plan (and write) only these keys; `None` for the whole app. A scoped sync is how drift
    /// reported by the change feed is reverted without re-reading the whole app.
    pub scope: Option<&'a BTreeSet<ObjectKey>>,
    /// Prune and empty-set rules.
    pub options: PlanOptions,
    /// The app's ignore rules (`sync.ignore`): their `paths` are out of `desired` already;
    /// their `managers` are applied here, against the live objects' `managedFields`, on
    /// stores that apply declared fields ([`ignore::strip_managed`]).
    pub ignore: &'a [IgnoreRule],
    /// Plan only; write nothing.
    pub dry_run: bool,
    /// Declared objects not to write in this pass (reverts held back while another writer
    /// fights over them): their steps are marked skipped and stay out of sync, and their
    /// inventory entries are left as they were. `None` for none.
    pub hold: Option<&'a BTreeSet<ObjectKey>>,
    /// The app's inventory as the caller last saw it, to save reading (and parsing) it again.
    /// A full sync uses it only when its resourceVersion is still the stored one; a scoped sync
    /// trusts it (a stale copy is caught by the inventory's compare-and-swap if it is written,
    /// and the retry reads it fresh). `None` reads it from the store.
    pub inventory: Option<&'a Inventory>,
    /// What the last sync of this same desired set found as declared ([`Outcome::verified`]
    /// of it): those objects whose resourceVersion has not moved are neither read nor planned.
    /// `None` plans every object in scope.
    pub verified: Option<&'a Verified>,
    /// The desired set's objects as JSON, made ahead by the thread of its digest
    /// ([`EntriesAhead`]; it must be `desired`'s): taken by a full sync whose new inventory
    /// entries are exactly `desired`'s objects, and written as they are. `None` makes them.
    pub entries_ahead: Option<&'a EntriesAhead>,
}

/// What a sync did.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The plan that was executed (or would be, on a dry run). Unchanged steps included.
    pub plan: Plan,
    /// Declared objects not applied, with why, a phrase that follows "is": `also declared by
    /// app web, which owns it`, or (stores that apply declared fields) `managed by Argo CD
    /// (annotation argocd.argoproj.io/tracking-id); not adopted without sync.adopt`.
    pub conflicts: BTreeMap<ObjectKey, String>,
    /// The store revision of the commit, 0 when nothing was written.
    pub committed_revision: u64,
    /// The objects written, with the resourceVersion the store gave them.
    pub written: Vec<(ObjectKey, u64)>,
    /// The live objects after the sync, for every key planned (absent when deleted or missing);
    /// those written as the store gave them back ([`store::Stored`]: the copy with the store's
    /// metadata made when asked for).
    pub live: BTreeMap<ObjectKey, store::Stored>,
    /// The app's inventory after the sync, when it differs from the copy passed in
    /// [`Request::inventory`] (or when none was passed); `None` when that copy is still current.
    pub inventory: Option<Inventory>,
    /// How many compare-and-swap conflicts were retried.
    pub retries: usize,
    /// Objects set aside because another writer changed them during the sync (see the module
    /// documentation): not written, out of sync, inventory entries kept.
    pub contested: BTreeSet<ObjectKey>,
    /// Declared objects in scope that [`Request::verified`] showed unchanged since they were
    /// last found as declared: not read, not planned (no step in [`Outcome::plan`]), still as
    /// declared.
    pub still_unchanged: BTreeSet<ObjectKey>,
    /// What to apply to the [`Verified`] given (or to a new one) before passing it to the next
    /// sync of the same desired set.
    pub verified: VerifiedUpdate,
}

/// True when a [`sync`] of `req` has nothing to do, found without reading or planning any
/// object: a whole-app request whose [`Request::verified`] holds every declared object, with
/// an inventory copy ([`Request::inventory`]) that is still the stored record, lists exactly
/// the declared objects (nothing to prune, claim or keep), names this revision and source,
/// and every object's resourceVersion ([`Store::versions`]) still the one it was found as
/// declared at. `false` means "sync to find out", never "something changed".
///
/// # Errors
///
/// [`Error::Store`] when the store fails.
pub async fn nothing_moved(store: &dyn Store, req: &Request<'_>) -> Result<bool> {
    let (Some(verified), Some(inventory)) = (req.verified, req.inventory) else {
        return Ok(false);
    };
    // The verified objects are declared ones the inventory lists (see `Verified`): as many as
    // declared means all of them; an inventory of as many lists nothing else.
    let same_sets = verified.len() == req.desired.len()
        && inventory.entries.len() == req.desired.len()
        && inventory.retained.is_empty();
    if req.scope.is_some()
        || !same_sets
        || inventory.revision.as_ref() != Some(req.revision)
        || inventory.source.as_deref() != Some(req.source)
        || verified.inventory_rv.is_none()
        || verified.inventory_rv != inventory.resource_version
    {
        return Ok(false);
    }
    let stored = store
        .version_of(&Inventory::record_key(req.app))
        .await
        .map_err(Error::Store)?;
    if stored != inventory.resource_version {
        return Ok(false);
    }
    let keys: Vec<&ObjectKey> = req.desired.keys().collect();
    let now = store.versions(&keys).await.map_err(Error::Store)?;
    Ok(keys.iter().zip(now).all(|(k, now)| {
        verified
            .entries
            .get(*k)
            .is_some_and(|rv| now == store::Version::At(*rv))
    }))
}

/// Plans and (unless `dry_run`) applies one sync. See the module documentation.
///
/// # Errors
///
/// [`Error::Store`] when the store fails, [`Error::Conflict`] after [`CONFLICT_RETRIES`]
/// conflicts in a row, [`Error::Inventory`] when an inventory record is unreadable. On error
/// nothing of this sync was written.
pub async fn sync(store: &dyn Store, req: &Request<'_>) -> Result<Outcome> {
    let mut attempt = 0;
    let mut retries = 0;
    let mut conflicted = BTreeSet::new();
    let mut contested = BTreeSet::new();
    loop {
        match attempt_sync(store, req, attempt, &contested).await {
            Err(Error::Store(e @ store::Error::Conflict { .. })) => {
                attempt += 1;
                tracing::debug!(attempt, error = %e, "Compare-and-swap conflict; planning again");
                let store::Error::Conflict { key, .. } = &e else {
                    unreachable!("matched above")
                };
                // An object's first conflict is planned again; its second sets it aside.
                if !key.is_reserved() && contested.len() < MAX_CONTESTED {
                    if conflicted.insert((**key).clone()) {
                        continue;
                    }
                    if contested.insert((**key).clone()) {
                        continue;
                    }
                }
                retries += 1;
                if retries > CONFLICT_RETRIES {
                    return Err(Error::Conflict {
                        attempts: attempt,
                        source: e,
                    });
                }
            }
            other => return other,
        }
    }
}

async fn attempt_sync(
    store: &dyn Store,
    req: &Request<'_>,
    attempt: usize,
    contested: &BTreeSet<ObjectKey>,
) -> Result<Outcome> {
    // The caller's copy on the first attempt; after a conflict, the store's.
    let loaded;
    let cached = match req.inventory {
        // A change-feed pass trusts the copy; a full pass checks that it is current, which
        // costs a version lookup instead of reading and parsing the whole record.
        Some(inv) if attempt == 0 && req.scope.is_some() => Some(inv),
        Some(inv) if attempt == 0 => {
            let stored = store
                .version_of(&Inventory::record_key(req.app))
                .await
                .map_err(Error::Store)?;
            (stored == inv.resource_version).then_some(inv)
        }
        _ => None,
    };
    let fresh = cached.is_none();
    let inventory = match cached {
        Some(inv) => inv,
        None => {
            loaded = Inventory::load_sharing(store, req.app, Some(req.desired)).await?;
            &loaded
        }
    };
    // A full sync must not undo a revision another process applied meanwhile.
    if fresh
        && req.scope.is_none()
        && !req.dry_run
        && let Some(seen) = req.inventory
        && inventory.revision != seen.revision
        && inventory.revision.as_ref() != Some(req.revision)
    {
        return Err(Error::Superseded {
            app: req.app.to_string(),
            found: inventory.revision.clone(),
        });
    }
    let mut desired: BTreeMap<&ObjectKey, &Object> = match req.scope {
        Some(scope) => scope
            .iter()
            .filter_map(|k| req.desired.get_key_value(k))
            .collect(),
        None => req.desired.iter().collect(),
    };
    let inventory_scoped: BTreeMap<&ObjectKey, &Object> = match req.scope {
        Some(scope) => scope
            .iter()
            .filter_map(|k| inventory.entries.get_key_value(k))
            .collect(),
        None => inventory.entries.iter().collect(),
    };
    // The ownership index matters only for keys this app does not own yet, and for prunes. An
    // object this app already owns stays its own even if the index names another app (two
    // inventories could list one object before the index existed; the index settles it for
    // claims and prunes).
    let mut conflicts = BTreeMap::new();
    let mut ownership: Option<Ownership> = None;
    if !all_in(desired.keys().copied(), &inventory.entries) {
        let index = Ownership::load(store).await?;
        desired.retain(|k, _| match index.other_owner(k, req.app) {
            Some(owner) if !inventory.entries.contains_key(*k) => {
                conflicts.insert(
                    (*k).clone(),
                    format!("also declared by app {owner}, which owns it"),
                );
                false
            }
            _ => true,
        });
        ownership = Some(index);
    }
    // Objects an earlier sync of this desired set found as declared, at the inventory record
    // this one holds, whose resourceVersion has not moved since: not read, not planned.
    let usable = req.verified.filter(|v| {
        attempt == 0
            && !fresh
            && v.inventory_rv.is_some()
            && v.inventory_rv == inventory.resource_version
    });
    let mut still: HashSet<&ObjectKey, crate::object::KeyHasher> = HashSet::default();
    if let Some(v) = usable {
        let (candidates, seen_at): (Vec<&ObjectKey>, Vec<u64>) = desired
            .keys()
            .filter_map(|k| v.entries.get(*k).map(|rv| (*k, *rv)))
            .filter(|(k, _)| !contested.contains(*k))
            .unzip();
        if !candidates.is_empty() {
            let now = store.versions(&candidates).await.map_err(Error::Store)?;
            still = candidates
                .into_iter()
                .zip(seen_at)
                .zip(now)
                .filter(|((_, seen), now)| *now == store::Version::At(*seen))
                .map(|((k, _), _)| k)
                .collect();
        }
    }
    // Those not known unchanged, filtered before they are copied (a no-op resync skips most).
    let keys: Vec<ObjectKey> = crate::object::sorted_union(
        desired.keys().copied().filter(|k| !still.contains(*k)),
        inventory_scoped
            .keys()
            .copied()
            .filter(|k| !still.contains(*k)),
    );
    let live = store.get_many(&keys).await.map_err(Error::Store)?.objects;
    // Fields another manager is meant to own (`sync.ignore[].managers`) leave the declaration
    // here, where the live object says who manages what.
    let mut managed_ignored: BTreeMap<ObjectKey, Object> = BTreeMap::new();
    if store.promises().server_side_apply && req.ignore.iter().any(|r| !r.managers.value.is_empty())
    {
        for (k, declared) in &desired {
            let Some(found) = live.get(*k) else { continue };
            let mut stripped = (*declared).clone();
            if ignore::strip_managed(k, &mut stripped, found, req.ignore) > 0 {
                managed_ignored.insert((*k).clone(), stripped);
            }
        }
    }
    for (k, declared) in desired.iter_mut() {
        if let Some(stripped) = managed_ignored.get(*k) {
            *declared = stripped;
        }
    }
    // On a shared target (Kubernetes) an object may exist before the app declares it: it is
    // taken over only when it already matches Git, or `sync.adopt` says so; never silently
    // from another tool or another app's label.
    if store.promises().server_side_apply {
        desired.retain(|k, declared| {
            if inventory.entries.contains_key(*k) {
                return true;
            }
            let Some(found) = live.get(*k) else {
                return true;
            };
            let manager = foreign_manager(found, req.app);
            let matches = manager.is_none()
                && diff::plan_one(k, declared, Some(found), None).action == Action::Unchanged;
            if matches {
                return true;
            }
            if req.options.adopt {
                tracing::warn!(object = %k, managed_by = manager.as_deref().unwrap_or("nobody"), "Adopting an existing object (sync.adopt)");
                return true;
            }
            let why = match manager {
                Some(m) => format!("managed by {m}; not adopted without sync.adopt"),
                None => "an existing object that differs from Git; not adopted without sync.adopt"
                    .to_string(),
            };
            conflicts.insert((*k).clone(), why);
            false
        });
    }
    // The empty-set guard looks at the whole desired set, not the scope.
    let options = PlanOptions {
        prune: req.options.prune,
        allow_empty: req.options.allow_empty || !req.desired.is_empty(),
        adopt: req.options.adopt,
        prune_non_empty: req.options.prune_non_empty,
    };
    let mut plan = diff::plan(
        desired
            .iter()
            .filter(|(k, _)| !still.contains(**k))
            .map(|(k, o)| (*k, *o)),
        &live,
        inventory_scoped
            .iter()
            .filter(|(k, _)| !still.contains(**k))
            .map(|(k, o)| (*k, *o)),
        options,
    );

    // A backend that normalizes what it stores (Kubernetes) confirms each suspect: a value
    // written another way (`0.5` CPU for `500m`) or a default it fills in is not drift. A
    // whole-app pass confirms every suspect with a dry run before writing anything. A
    // change-feed pass (a revert, where every round trip is latency) applies at once a suspect
    // whose differing fields another manager wrote (`managedFields` names it: someone changed
    // them); one whose fields only this store's manager owns is confirmed first, since an
    // apply of a value the server writes another way still writes (its managedFields time).
    let ours: Vec<&str> = store.field_manager().into_iter().collect();
    let confirm_first = |step: &diff::Step| {
        req.scope.is_none()
            || step.live.as_ref().is_none_or(|live| {
                step.changes
                    .iter()
                    .all(|c| diff::who_changed(live, &c.path, &ours).is_none())
            })
    };
    if store.promises().server_side_apply {
        for step in plan.steps.iter_mut().filter(|s| s.action == Action::Update) {
            if !confirm_first(step) {
                continue;
            }
            let (Some(declared), Some(live)) = (desired.get(&step.key), step.live.as_ref()) else {
                continue;
            };
            let mut declared = (*declared).clone();
            label(&mut declared, req.app);
            if !store
                .confirm_drift(&declared, live)
                .await
                .map_err(Error::Store)?
            {
                step.action = Action::Unchanged;
                step.target = None;
                step.live = None;
                step.changes.clear();
            }
        }
    }

    // What this sync changes in the inventory: the writes, and the new entries.
    let mut writes = Vec::new();
    let mut updates: Vec<(ObjectKey, Option<Object>)> = Vec::new();
    // The steps come in key order: each declaration found in one walk of the set (made
    // before the loop, which awaits the store: a walk held across it is not `Send`).
    let declarations: Vec<Option<&Object>> = {
        let mut at = crate::object::InOrder::new(&desired);
        plan.steps.iter().map(|s| at.get(&s.key).copied()).collect()
    };
    for (step, declaration) in plan.steps.iter_mut().zip(declarations) {
        match step.action {
            Action::Create | Action::Update if req.hold.is_some_and(|h| h.contains(&step.key)) => {
                step.skipped = Some("held: another writer keeps changing it back".into());
            }
            Action::Create | Action::Update | Action::Delete if contested.contains(&step.key) => {
                step.skipped = Some(CONTESTED.into());
            }
            Action::Create | Action::Update | Action::Unchanged => {
                // The write takes the target: a sync that writes keeps no second copy (a dry
                // run keeps it for rendering).
                let target = if req.dry_run {
                    None
                } else {
                    step.target.take()
                };
                let declared = declaration.expect("a step to write is of a declared object");
                if let Some(target) = target {
                    // Server-side apply merges the declaration itself: it gets only what Git
                    // declares, with the owning app's label.
                    let object = if store.promises().server_side_apply {
                        let mut object = declared.clone();
                        label(&mut object, req.app);
                        object
                    } else {
                        target
                    };
                    writes.push(Write::Put {
                        object,
                        precondition: Precondition::matching(step.live.as_ref()),
                        json: None,
                    });
                } else if step.action == Action::Unchanged
                    && !req.dry_run
                    && store.promises().server_side_apply
                    && !inventory.entries.contains_key(&step.key)
                {
                    // Adopting an object that already matches: one apply claims it (the app's
                    // label, driftless as the manager of the declared fields).
                    let mut object = declared.clone();
                    label(&mut object, req.app);
                    writes.push(Write::Put {
                        object,
                        precondition: Precondition::matching(live.get(&step.key)),
                        json: None,
                    });
                }
                if inventory.entries.get(&step.key) != Some(declared) {
                    updates.push((step.key.clone(), Some(declared.clone())));
                }
            }
            Action::Delete => {
                if step.skipped.is_some() {
                    continue;
                }
                if ownership.is_none() {
                    ownership = Some(Ownership::load(store).await?);
                }
                let owner = ownership
                    .as_ref()
                    .and_then(|o| o.other_owner(&step.key, req.app));
                if let Some(owner) = owner {
                    // Another app owns it: never deleted from here; this app lets go of it.
                    step.skipped = Some(format!("owned by app {owner}, which declares it"));
                    updates.push((step.key.clone(), None));
                    continue;
                }
                // Deleting a Namespace or a CRD deletes what it holds: held while that
                // includes objects the app does not own (or cannot be listed).
                if store.promises().server_side_apply
                    && !req.options.prune_non_empty
                    && let Some(live) = step.live.as_ref()
                {
                    let owned: BTreeSet<ObjectKey> = inventory.entries.keys().cloned().collect();
                    let held = match store.holds_others(live, &owned).await {
                        Ok(None) => None,
                        Ok(Some(what)) => Some(format!(
                            "{what}; set sync.pruneNonEmpty: true to prune it anyway"
                        )),
                        Err(e) => Some(format!(
                            "cannot list what it holds: {}",
                            store::error_chain(&e)
                        )),
                    };
                    if let Some(why) = held {
                        step.skipped = Some(why);
                        continue;
                    }
                }
                writes.push(Write::Delete {
                    key: step.key.clone(),
                    precondition: Precondition::matching(step.live.as_ref()),
                });
                updates.push((step.key.clone(), None));
            }
        }
    }
    // Inventory entries that are neither declared nor live are gone already.
    for k in inventory_scoped.keys() {
        if !desired.contains_key(*k) && !live.contains_key(*k) {
            updates.push(((*k).clone(), None));
        }
    }
    let revision = match req.scope {
        None => Some(req.revision.clone()),
        Some(_) => inventory
            .revision
            .clone()
            .or_else(|| Some(req.revision.clone())),
    };
    let source = match req.scope {
        None => Some(req.source.to_string()),
        Some(_) => inventory.source.clone(),
    };
    // A full sync that writes objects also writes the inventory (compared and swapped, even
    // unchanged): its plan then holds only if nobody applied another revision meanwhile.
    let writes_objects = !writes.is_empty();
    let changed = !updates.is_empty()
        || revision != inventory.revision
        || source != inventory.source
        || (req.scope.is_none() && writes_objects);
    // What the next sync of this desired set may skip: the objects found as declared now (an
    // object this sync claims by writing it is not among them), and those still unchanged.
    let mut verified = VerifiedUpdate {
        reset: usable.is_none(),
        inventory_rv: inventory.resource_version,
        moved: conflicts.keys().cloned().collect(),
        found: Vec::new(),
    };
    let still_unchanged: BTreeSet<ObjectKey> = if still.is_empty() {
        BTreeSet::new()
    } else {
        desired
            .keys()
            .filter(|k| still.contains(**k))
            .map(|k| (*k).clone())
            .collect()
    };
    let mut live_at = crate::object::InOrder::new(&live);
    for step in &plan.steps {
        let found = live_at.get(&step.key).and_then(Object::resource_version);
        if step.action == Action::Unchanged
            && step.skipped.is_none()
            && inventory.entries.contains_key(&step.key)
            && let Some(rv) = found
        {
            verified.found.push((step.key.clone(), rv));
        } else {
            verified.moved.push(step.key.clone());
        }
    }
    if req.dry_run {
        return Ok(Outcome {
            plan,
            conflicts,
            committed_revision: 0,
            written: Vec::new(),
            live: live
                .into_iter()
                .map(|(k, o)| (k, store::Stored::from(o)))
                .collect(),
            inventory: fresh.then(|| inventory.clone()),
            retries: attempt,
            contested: contested.clone(),
            still_unchanged,
            verified,
        });
    }
    // What stays owned without being declared: a full sync says it anew; a scoped one keeps
    // what was retained (the desired set does not change) minus what is gone.
    let retained_after = |entries: &BTreeMap<ObjectKey, Object>| -> BTreeSet<ObjectKey> {
        match req.scope {
            // One walk of both in key order, not a search of `desired` per entry (10,000
            // searches were a tenth of the thread of a cold sync).
            None => {
                let mut declared = desired.keys().copied().peekable();
                entries
                    .keys()
                    .filter(|k| {
                        while declared.next_if(|d| *d < *k).is_some() {}
                        declared.peek() != Some(k)
                    })
                    .cloned()
                    .collect()
            }
            Some(_) => inventory
                .retained
                .iter()
                .filter(|k| entries.contains_key(*k))
                .cloned()
                .collect(),
        }
    };
    // The entries after this sync: copied only when it changes them.
    let after = (!updates.is_empty()).then(|| {
        settled(
            inventory
                .entries
                .iter()
                .map(|(k, v)| (k.clone(), Some(v.clone())))
                .chain(updates.iter().cloned())
                .collect(),
        )
    });
    let retained = retained_after(after.as_ref().unwrap_or(&inventory.entries));
    let changed = changed || retained != inventory.retained;
    let next = changed.then(|| {
        let mut next = inventory.clone();
        next.revision = revision;
        next.source = source;
        if let Some(after) = after {
            next.entries = after;
        }
        next.retained = retained;
        next
    });
    if let Some(next) = &next {
        let mut index_write = None;
        // Claims and releases go into the index in the same transaction, compared and swapped:
        // a concurrent claimant's commit makes this one fail and plan again. Made before the
        // inventory's text, which the digest's threads may still be making meanwhile; written
        // after the inventory, as before.
        let claims_or_releases = next
            .entries
            .keys()
            .any(|k| !inventory.entries.contains_key(k))
            || inventory
                .entries
                .keys()
                .any(|k| !next.entries.contains_key(k));
        if claims_or_releases {
            let mut index = match ownership.take() {
                Some(o) => o,
                None => Ownership::load(store).await?,
            };
            // Claims: every entry no app owns yet, in one walk of both (in key order).
            let mut claims = Vec::new();
            let mut owned = index.owners.keys().peekable();
            for k in next.entries.keys() {
                while owned.next_if(|o| *o < k).is_some() {}
                if owned.next_if(|o| *o == k).is_none() {
                    claims.push((k.clone(), Some(req.app.to_string())));
                }
            }
            let mut changed = !claims.is_empty();
            if changed {
                let owners = std::mem::take(&mut index.owners);
                index.owners = settled(
                    owners
                        .into_iter()
                        .map(|(k, o)| (k, Some(o)))
                        .chain(claims)
                        .collect(),
                );
            }
            for k in inventory.entries.keys() {
                if !next.entries.contains_key(k)
                    && index.owners.get(k).is_some_and(|o| o == req.app)
                {
                    index.owners.remove(k);
                    changed = true;
                }
            }
            if changed || index.resource_version.is_none() {
                index_write = Some(Write::PutRecord {
                    record: index.to_record_text()?,
                    precondition: match index.resource_version {
                        Some(rv) => Precondition::ResourceVersion(rv),
                        None => Precondition::Absent,
                    },
                });
            }
        }
        // The entries' text made ahead, when they are exactly the desired set's objects.
        let ahead = match req.entries_ahead {
            Some(a) if next.retained.is_empty() && same_objects(&next.entries, req.desired) => {
                a.take().await
            }
            _ => None,
        };
        let record = match ahead {
            Some(ahead) => {
                let (record, at) = next.to_record_text_around(ahead.json)?;
                // The objects written are written from their text in it, not serialized again.
                lend_json(&mut writes, req.desired, &ahead.spans, &record, at);
                record
            }
            None => next.to_record_text()?,
        };
        writes.push(Write::PutRecord {
            record,
            precondition: match inventory.resource_version {
                Some(rv) => Precondition::ResourceVersion(rv),
                None => Precondition::Absent,
            },
        });
        writes.extend(index_write);
    }
    // A commit the store splits (etcd beyond one transaction) can stop part way, and a crash
    // then would leave created objects no inventory lists, which nothing would ever prune. So
    // the objects it creates are first recorded (and claimed) in a transaction of their own;
    // the revision stays the one applied whole.
    if let Some(next) = &next
        && !store.commits_atomically(&writes)
    {
        let creates: Vec<&ObjectKey> = next
            .entries
            .keys()
            .filter(|k| !inventory.entries.contains_key(*k) && !live.contains_key(*k))
            .collect();
        if !creates.is_empty() {
            record_intent(store, req.app, inventory, next, &creates, &mut writes).await?;
        }
    }
    let committed = store.commit(writes).await.map_err(Error::Store)?;
    let mut next = match next {
        Some(n) => Some(n),
        None => fresh.then(|| inventory.clone()),
    };
    let mut written = Vec::new();
    // What the live set becomes: the objects as stored (after what was read of them), the
    // deleted ones gone.
    let mut stored = Vec::with_capacity(committed.stored.len());
    for obj in committed.stored {
        let key = obj.key();
        if key.is_reserved() {
            if key == Inventory::record_key(req.app)
                && let Some(n) = &mut next
            {
                n.resource_version = obj.resource_version();
            }
            continue;
        }
        // Each object's own revision: a backend may split a long commit (etcd).
        written.push((
            key.clone(),
            obj.resource_version().unwrap_or(committed.revision),
        ));
        stored.push((key, Some(obj)));
    }
    for step in &plan.steps {
        if step.action == Action::Delete && step.skipped.is_none() {
            stored.push((step.key.clone(), None));
        }
    }
    let live_after: BTreeMap<ObjectKey, store::Stored> = settled(
        live.into_iter()
            .map(|(k, o)| (k, Some(store::Stored::from(o))))
            .chain(stored)
            .collect(),
    );
    // A suspect applied at once that the server found nothing to change in (it kept the
    // resourceVersion) was no drift.
    if store.promises().server_side_apply && req.scope.is_some() {
        for step in plan
            .steps
            .iter_mut()
            .filter(|s| s.action == Action::Update && s.skipped.is_none())
        {
            let before = step.live.as_ref().and_then(Object::resource_version);
            let after = live_after
                .get(&step.key)
                .and_then(store::Stored::resource_version);
            if before.is_some() && before == after {
                written.retain(|(k, _)| *k != step.key);
                step.action = Action::Unchanged;
                step.target = None;
                step.live = None;
                step.changes.clear();
            }
        }
    }
    if let Some(n) = &next {
        verified.inventory_rv = n.resource_version;
    }
    // A store that keeps the body it is given holds each written object as this plan made it:
    // the merge of the live object and the declaration, which plans as unchanged against the
    // same declaration and the inventory entry written with it. Found as declared, at the
    // version the store gave it, so that the next pass need not read it back. (A store that
    // applies declared fields, Kubernetes, may change what it stores: admission, defaults; its
    // writes are read back by the next pass.)
    if !store.promises().server_side_apply {
        verified.found.extend(written.iter().cloned());
    }
    Ok(Outcome {
        plan,
        conflicts,
        committed_revision: committed.revision,
        written,
        live: live_after,
        inventory: next,
        retries: attempt,
        contested: contested.clone(),
        still_unchanged,
        verified,
    })
}

/// The map that `entries` leave, taken in order: a later entry for a key replaces an earlier
/// one, and `None` removes the key. Sorted (stably: runs already in order cost a merge) and
/// built at once (`BTreeMap`'s bulk build from sorted input), with no search per key: a map of
/// 10,000 objects updated one insert at a time spent about 13 key comparisons, mostly cache
/// misses, on each.
pub(crate) fn settled<V>(mut entries: Vec<(ObjectKey, Option<V>)>) -> BTreeMap<ObjectKey, V> {
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = Vec::with_capacity(entries.len());
    let mut entries = entries.into_iter().peekable();
    while let Some((k, v)) = entries.next() {
        if entries.peek().is_some_and(|(next, _)| *next == k) {
            continue;
        }
        if let Some(v) = v {
            out.push((k, v));
        }
    }
    out.into_iter().collect()
}

/// True when every key of `keys` (in ascending order) is a key of `map`. Many keys: one walk
/// of both in step, instead of a lookup per key; a few (a change-feed pass): a lookup each,
/// instead of a walk through the whole map.
fn all_in<'a, V>(
    mut keys: impl ExactSizeIterator<Item = &'a ObjectKey>,
    map: &BTreeMap<ObjectKey, V>,
) -> bool {
    if keys.len().saturating_mul(16) < map.len() {
        return keys.all(|k| map.contains_key(k));
    }
    let mut there = map.keys().peekable();
    for k in keys {
        while there.next_if(|t| *t < k).is_some() {}
        if there.next_if(|t| *t == k).is_none() {
            return false;
        }
    }
    true
}

/// Commits `inventory` with the `creates` of `next` added, and their claims in the ownership
/// index, then points the inventory and index writes in `writes` at the versions it stored.
/// Who else manages a live object, from the marks the GitOps tools leave: Argo CD's tracking
/// annotation or instance label, Flux's Kustomization or HelmRelease labels, or another
/// driftless app's label. `None` when none is there.
fn foreign_manager(live: &Object, app: &str) -> Option<String> {
    let meta = live.metadata();
    let get = |map: &str, key: &str| {
        meta.get(map)
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    if let Some(owner) = get("labels", store::APP_LABEL)
        && owner != app
    {
        return Some(format!(
            "driftless app {owner} (label {})",
            store::APP_LABEL
        ));
    }
    for (map, key, tool) in [
        ("annotations", "argocd.argoproj.io/tracking-id", "Argo CD"),
        ("labels", "argocd.argoproj.io/instance", "Argo CD"),
        ("labels", "kustomize.toolkit.fluxcd.io/name", "Flux"),
        ("labels", "helm.toolkit.fluxcd.io/name", "Flux"),
    ] {
        if get(map, key).is_some() {
            let kind = if map == "labels" {
                "label"
            } else {
                "annotation"
            };
            return Some(format!("{tool} ({kind} {key})"));
        }
    }
    None
}

/// Adds the owning app's label ([`store::APP_LABEL`]) to a declaration about to be applied by
/// server-side apply.
fn label(object: &mut Object, app: &str) {
    let labels = object
        .metadata_mut()
        .entry("labels")
        .or_insert_with(|| Value::Object(Map::new()));
    if !labels.is_object() {
        *labels = Value::Object(Map::new());
    }
    if let Some(labels) = labels.as_object_mut() {
        labels.insert(store::APP_LABEL.into(), Value::String(app.to_string()));
    }
}

async fn record_intent(
    store: &dyn Store,
    app: &str,
    inventory: &Inventory,
    next: &Inventory,
    creates: &[&ObjectKey],
    writes: &mut [Write],
) -> Result<()> {
    let mut intent = inventory.clone();
    for k in creates {
        intent
            .entries
            .insert((*k).clone(), next.entries[*k].clone());
    }
    let mut index = Ownership::load(store).await?;
    // The index this sync planned with must still be the stored one: its write in `writes`
    // (the final claims and releases) would otherwise overwrite another app's claim.
    let planned = writes.iter().find_map(|w| match w {
        Write::PutRecord {
            record,
            precondition,
        } if record.key() == Ownership::record_key() => Some(*precondition),
        _ => None,
    });
    if let Some(planned) = planned {
        planned
            .check_version(&Ownership::record_key(), index.resource_version)
            .map_err(Error::Store)?;
    }
    let before = index.clone();
    for k in creates {
        index
            .owners
            .entry((*k).clone())
            .or_insert_with(|| app.to_string());
    }
    let version = |rv: Option<u64>| match rv {
        Some(rv) => Precondition::ResourceVersion(rv),
        None => Precondition::Absent,
    };
    let mut intent_writes = vec![Write::PutRecord {
        record: intent.to_record_text()?,
        precondition: version(inventory.resource_version),
    }];
    if index != before || index.resource_version.is_none() {
        intent_writes.push(Write::PutRecord {
            record: index.to_record_text()?,
            precondition: version(index.resource_version),
        });
    }
    let committed = store.commit(intent_writes).await.map_err(Error::Store)?;
    tracing::debug!(
        app,
        objects = creates.len(),
        "Recorded the objects to create before a commit split across transactions"
    );
    for stored in committed.stored {
        let key = stored.key();
        for w in writes.iter_mut() {
            if matches!(w, Write::Put { .. } | Write::PutRecord { .. }) && w.key() == key {
                *w.precondition_mut() = version(stored.resource_version());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;
    use serde_json::json;

    proptest::proptest! {
        /// The map `settled` builds is the one inserting and removing the entries one at a
        /// time, in order, gives.
        #[test]
        fn settled_is_the_map_entries_leave_one_at_a_time(
            entries in proptest::collection::vec((0u8..40, proptest::option::of(0u32..5)), 0..120)
        ) {
            let key = |n: u8| ObjectKey::new("", "ConfigMap", "ns", format!("c{n}"));
            let mut want = BTreeMap::new();
            for (n, v) in &entries {
                match v {
                    Some(v) => want.insert(key(*n), *v),
                    None => want.remove(&key(*n)),
                };
            }
            let got = settled(entries.iter().map(|(n, v)| (key(*n), *v)).collect());
            proptest::prop_assert_eq!(got, want);
        }
    }

    fn cm(name: &str, v: &str) -> Object {
        Object::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default"}, "data": {"v": v}}))
        .unwrap()
    }

    fn set(objs: &[Object]) -> BTreeMap<ObjectKey, Object> {
        objs.iter().map(|o| (o.key(), o.clone())).collect()
    }

    #[test]
    fn the_inventory_text_made_on_all_cores_is_the_one_serde_makes() {
        // The record as serde's derive wrote it before the entries were made in parts.
        fn reference(inv: &Inventory) -> String {
            #[derive(serde::Serialize)]
            struct Spec<'a> {
                revision: Option<&'a str>,
                source: Option<&'a str>,
                entries: Vec<&'a Object>,
                #[serde(skip_serializing_if = "Option::is_none")]
                retained: Option<Vec<[&'a str; 4]>>,
            }
            let spec = Spec {
                revision: inv.revision.as_ref().map(|r| r.0.as_str()),
                source: inv.source.as_deref(),
                entries: inv.entries.values().collect(),
                retained: (!inv.retained.is_empty()).then(|| {
                    inv.retained
                        .iter()
                        .map(|k| [k.group(), k.kind(), k.namespace(), k.name()])
                        .collect()
                }),
            };
            let record = RecordText::new(INVENTORY_KIND, &inv.app, "spec", &spec).unwrap();
            record.text(&record.head())
        }
        // Across part and batch boundaries (256, 4,096), with and without retained entries, a
        // revision, a source that needs escaping, and entries read back as stored text.
        for n in [0, 1, 255, 256, 257, 4097] {
            let mut entries: BTreeMap<ObjectKey, Object> = (0..n)
                .map(|i| {
                    let o = cm(&format!("c{i:05}"), &format!("v\"{i}\u{e9}"));
                    (o.key(), o)
                })
                .collect();
            if let Some((_, first)) = entries.iter_mut().next() {
                *first = Object::from_stored_text(&first.to_json()).unwrap();
            }
            for (retained, revision, source) in [
                (BTreeSet::new(), None, None),
                (
                    [ObjectKey::new("", "ConfigMap", "default", "gone")].into(),
                    Some(Revision("r1".into())),
                    Some("repo=\"x\" path=a\\b".to_string()),
                ),
            ] {
                let inv = Inventory {
                    app: "app".into(),
                    revision,
                    source,
                    entries: entries.clone(),
                    retained,
                    resource_version: None,
                };
                let record = inv.to_record_text().unwrap();
                assert_eq!(record.text(&record.head()), reference(&inv), "{n} entries");
                // Made around the entries' text made ahead (in its buffer): the same record.
                let mut ahead = Vec::new();
                for (i, o) in inv.entries.values().enumerate() {
                    if i > 0 {
                        ahead.push(b',');
                    }
                    o.write_json(&mut ahead).unwrap();
                }
                let around = inv.to_record_text_with(Some(ahead)).unwrap();
                assert_eq!(around.text(&around.head()), reference(&inv), "{n} entries");
                assert_eq!(
                    around.into_text(&record.head()),
                    record.clone().into_text(&record.head())
                );
                let back = Inventory::from_record("app", record.to_object().unwrap()).unwrap();
                assert_eq!(back.entries, inv.entries, "{n} entries");
                assert_eq!(back.retained, inv.retained);
            }
        }
    }

    #[test]
    fn the_ownership_record_reads_back_as_the_index_it_was_made_from() {
        let mut owners = BTreeMap::new();
        for (key, app) in [
            (ObjectKey::new("", "ConfigMap", "default", "a"), "one"),
            (ObjectKey::new("apps", "Deployment", "web", "b\"q"), "two"),
            (ObjectKey::new("", "Namespace", "", "web"), "one"),
        ] {
            owners.insert(key, app.to_string());
        }
        let index = Ownership {
            owners,
            resource_version: None,
        };
        let record = index.to_record_text().unwrap();
        assert_eq!(record.key(), Ownership::record_key());
        let object = record.to_object().unwrap();
        assert_eq!(
            object.get("spec"),
            Some(&json!({"owners": [
                ["", "ConfigMap", "default", "a", "one"],
                ["", "Namespace", "", "web", "one"],
                ["apps", "Deployment", "web", "b\"q", "two"],
            ]}))
        );
        assert_eq!(Ownership::from_record(&object).unwrap(), index);
    }

    fn req<'a>(
        app: &'a str,
        rev: &'a Revision,
        desired: &'a BTreeMap<ObjectKey, Object>,
    ) -> Request<'a> {
        Request {
            app,
            revision: rev,
            source: "test",
            desired,
            scope: None,
            options: PlanOptions::default(),
            ignore: &[],
            dry_run: false,
            inventory: None,
            hold: None,
            verified: None,
            entries_ahead: None,
        }
    }

    /// A memory store for faults: before its `n`th commit (from 0) another writer puts
    /// `foreign(n)`; with [`Hooked::splitting_at`], commits longer than that are split (not
    /// atomic), and the first split one dies after its first part; with
    /// [`Hooked::in_lockstep`], the first commits wait for each other, so every sync has read
    /// and planned before any of them commits (the worst interleaving two processes can have).
    struct Hooked {
        inner: MemoryStore,
        foreign: Box<dyn Fn(usize) -> Vec<Object> + Send + Sync>,
        commits: std::sync::atomic::AtomicUsize,
        split_at: Option<usize>,
        crash: std::sync::atomic::AtomicBool,
        lockstep: Option<(tokio::sync::Barrier, usize)>,
    }

    impl Hooked {
        fn new(foreign: impl Fn(usize) -> Vec<Object> + Send + Sync + 'static) -> Self {
            Self {
                inner: MemoryStore::new(),
                foreign: Box::new(foreign),
                commits: Default::default(),
                split_at: None,
                crash: true.into(),
                lockstep: None,
            }
        }

        fn splitting_at(mut self, n: usize) -> Self {
            self.split_at = Some(n);
            self
        }

        fn in_lockstep(mut self, n: usize) -> Self {
            self.lockstep = Some((tokio::sync::Barrier::new(n), n));
            self
        }
    }

    #[async_trait::async_trait]
    impl Store for Hooked {
        async fn get(&self, k: &ObjectKey) -> store::Result<Option<Object>> {
            self.inner.get(k).await
        }
        async fn version_of(&self, k: &ObjectKey) -> store::Result<Option<u64>> {
            self.inner.version_of(k).await
        }
        async fn get_many(&self, k: &[ObjectKey]) -> store::Result<store::Listing> {
            self.inner.get_many(k).await
        }
        async fn list(&self, s: &Selector) -> store::Result<store::Listing> {
            self.inner.list(s).await
        }
        async fn commit(&self, mut w: Vec<Write>) -> store::Result<store::Committed> {
            use std::sync::atomic::Ordering::SeqCst;
            let n = self.commits.fetch_add(1, SeqCst);
            if let Some((barrier, first)) = &self.lockstep
                && n < *first
            {
                barrier.wait().await;
            }
            let foreign: Vec<Write> = (self.foreign)(n)
                .into_iter()
                .map(|object| Write::Put {
                    object,
                    precondition: Precondition::Any,
                    json: None,
                })
                .collect();
            if !foreign.is_empty() {
                self.inner.commit(foreign).await?;
            }
            if let Some(k) = self.split_at
                && w.len() > k
                && self.crash.swap(false, SeqCst)
            {
                w.truncate(k);
                self.inner.commit(w).await?;
                return Err(store::Error::Backend {
                    op: "commit",
                    source: "the process died".into(),
                });
            }
            self.inner.commit(w).await
        }
        async fn revision(&self) -> store::Result<u64> {
            self.inner.revision().await
        }
        async fn watch(&self, from: u64) -> store::Result<store::Watch> {
            self.inner.watch(from).await
        }
        fn backend(&self) -> &'static str {
            "hooked"
        }
        fn commits_atomically(&self, w: &[Write]) -> bool {
            self.split_at.is_none_or(|k| w.len() <= k)
        }
    }

    #[test]
    fn an_inventory_read_from_its_text_is_the_record_read_as_an_object() {
        let mut inv = Inventory {
            app: "app".into(),
            revision: Some(Revision("r1".into())),
            source: Some("repo=x".into()),
            entries: set(&(0..600)
                .map(|i| cm(&format!("c{i}"), "1"))
                .collect::<Vec<_>>()),
            ..Inventory::default()
        };
        inv.retained.insert(cm("c1", "1").key());
        // The text the sync writes reads back as the inventory, with and without retained
        // entries, whichever way it is read.
        let as_text = inv.to_record_text().unwrap();
        assert_eq!(as_text.key(), Inventory::record_key("app"));
        let mut bare = inv.clone();
        bare.retained.clear();
        let bare_record = bare.to_record_text().unwrap().to_object().unwrap();
        assert!(bare_record.get("spec").unwrap().get("retained").is_none());
        let mut bare_read = Inventory::from_record("app", bare_record).unwrap();
        bare_read.resource_version = None;
        assert_eq!(bare_read, bare);
        let mut record = as_text.to_object().unwrap();
        record
            .metadata_mut()
            .insert("resourceVersion".into(), json!("7"));
        let text = record.to_json();
        let fast = Inventory::from_text("app", &text, 7, None)
            .unwrap()
            .unwrap();
        let slow = Inventory::from_record("app", record).unwrap();
        assert_eq!(fast, slow);
        assert_eq!(fast.entries.len(), 600);
        assert_eq!(
            fast,
            Inventory {
                resource_version: Some(7),
                ..inv.clone()
            }
        );
        // Read beside a desired set: an entry whose text is the desired object's is that object
        // (shared); one that differs (c2's value), one not desired (c3), one with the same key
        // and other fields (c4 with a label) are decoded as stored.
        let mut desired = inv.entries.clone();
        desired.insert(cm("c2", "2").key(), cm("c2", "2"));
        desired.remove(&cm("c3", "1").key());
        let mut labelled = cm("c4", "1");
        labelled
            .metadata_mut()
            .insert("labels".into(), json!({"a": "b"}));
        desired.insert(labelled.key(), labelled);
        let shared = Inventory::from_text("app", &text, 7, Some(&desired))
            .unwrap()
            .unwrap();
        assert_eq!(shared, slow);
        for (k, o) in &shared.entries {
            let is_shared = desired.get(k).is_some_and(|d| d.same(o));
            let expected = !["c2", "c3", "c4"].contains(&k.name());
            assert_eq!(is_shared, expected, "{k}");
        }
        // The same after the fact, by equality, for an inventory read before the parse.
        let mut later = fast.clone();
        assert_eq!(later.share_with(&desired), 597);
        assert_eq!(later, fast);
        for (k, o) in &later.entries {
            let is_shared = desired.get(k).is_some_and(|d| d.same(o));
            assert_eq!(is_shared, !["c2", "c3", "c4"].contains(&k.name()), "{k}");
        }
        assert_eq!(later.share_with(&desired), 0, "already shared");
        // Not this shape: left to `from_record`, which names the problem.
        for odd in [
            json!({"spec": {"revision": 3}}),
            json!({"spec": {"retained": [["a", "b"]]}}),
            json!({"kind": "Inventory"}),
        ] {
            assert!(
                Inventory::from_text("app", &odd.to_string(), 1, None).is_none(),
                "{odd}"
            );
        }
        let bad = json!({"spec": {"entries": [1]}}).to_string();
        assert!(matches!(
            Inventory::from_text("app", &bad, 1, None),
            Some(Err(Error::Inventory { .. }))
        ));
    }

    #[tokio::test]
    async fn first_sync_creates_and_records_the_inventory_in_one_transaction() {
        let store = MemoryStore::new();
        let rev = Revision("r1".into());
        let desired = set(&[cm("a", "1"), cm("b", "1")]);
        let out = sync(&store, &req("app", &rev, &desired)).await.unwrap();
        assert_eq!(out.committed_revision, 1);
        assert_eq!(out.written.len(), 2);
        assert_eq!(out.inventory.as_ref().map(|i| i.entries.len()), Some(2));
        let inv = Inventory::load(&store, "app").await.unwrap();
        assert_eq!(inv.entries.len(), 2);
        assert_eq!(inv.revision, Some(rev.clone()));
        assert_eq!(
            inv.resource_version,
            Some(1),
            "objects and inventory share one revision"
        );
        // Again: nothing to write, no new revision.
        let again = sync(&store, &req("app", &rev, &desired)).await.unwrap();
        assert_eq!(again.committed_revision, 0);
        assert!(again.plan.is_noop());
        assert_eq!(store.revision().await.unwrap(), 1);
    }

    #[tokio::test]
    async fn held_objects_are_left_as_they_are_and_stay_out_of_sync() {
        let store = MemoryStore::new();
        let rev = Revision("r1".into());
        let desired = set(&[cm("a", "1"), cm("b", "1")]);
        sync(&store, &req("app", &rev, &desired)).await.unwrap();
        // Another writer changes both; `a` is held.
        for name in ["a", "b"] {
            store
                .commit(vec![Write::Put {
                    object: cm(name, "theirs"),
                    precondition: Precondition::Any,
                    json: None,
                }])
                .await
                .unwrap();
        }
        let hold: BTreeSet<ObjectKey> = [cm("a", "").key()].into();
        let out = sync(
            &store,
            &Request {
                hold: Some(&hold),
                ..req("app", &rev, &desired)
            },
        )
        .await
        .unwrap();
        let summary = out.plan.summary();
        assert_eq!((summary.update, summary.skipped), (1, 1));
        let a = store.get(&cm("a", "").key()).await.unwrap().unwrap();
        let b = store.get(&cm("b", "").key()).await.unwrap().unwrap();
        assert_eq!(a.get("data"), Some(&json!({"v": "theirs"})), "held");
        assert_eq!(b.get("data"), Some(&json!({"v": "1"})), "reverted");
        let step = out
            .plan
            .steps
            .iter()
            .find(|s| s.key == cm("a", "").key())
            .unwrap();
        assert!(step.skipped.as_deref().unwrap().starts_with("held"));
    }

    #[tokio::test]
    async fn objects_owned_by_another_app_are_conflicts_not_a_tug_of_war() {
        let store = MemoryStore::new();
        let rev = Revision("r".into());
        sync(&store, &req("first", &rev, &set(&[cm("shared", "first")])))
            .await
            .unwrap();
        let out = sync(
            &store,
            &req(
                "second",
                &rev,
                &set(&[cm("shared", "second"), cm("own", "x")]),
            ),
        )
        .await
        .unwrap();
        assert_eq!(
            out.conflicts
                .get(&cm("shared", "").key())
                .map(String::as_str),
            Some("also declared by app first, which owns it")
        );
        let live = store.get(&cm("shared", "").key()).await.unwrap().unwrap();
        assert_eq!(live.get("data"), Some(&json!({"v": "first"})));
        assert!(
            Inventory::load(&store, "second")
                .await
                .unwrap()
                .entries
                .contains_key(&cm("own", "").key())
        );
    }

    #[tokio::test]
    async fn two_apps_claiming_one_object_at_once_never_both_own_it() {
        let store = Hooked::new(|_| vec![]).in_lockstep(2);
        // The shared object is already live as both declare it: an unchanged object is not
        // written, so only the claim itself can decide.
        store
            .inner
            .commit(vec![Write::Put {
                object: cm("shared", "same"),
                precondition: Precondition::Any,
                json: None,
            }])
            .await
            .unwrap();
        let rev = Revision("r".into());
        let (a_set, b_set) = (
            set(&[cm("shared", "same"), cm("a-own", "1")]),
            set(&[cm("shared", "same"), cm("b-own", "1")]),
        );
        let (req_a, req_b) = (req("a", &rev, &a_set), req("b", &rev, &b_set));
        let (a, b) = tokio::join!(sync(&store, &req_a), sync(&store, &req_b));
        let (a, b) = (a.unwrap(), b.unwrap());
        let key = cm("shared", "").key();
        let inv_a = Inventory::load(&store, "a").await.unwrap();
        let inv_b = Inventory::load(&store, "b").await.unwrap();
        let owners = [
            inv_a.entries.contains_key(&key),
            inv_b.entries.contains_key(&key),
        ];
        assert_eq!(
            owners.iter().filter(|o| **o).count(),
            1,
            "exactly one inventory owns it: {owners:?}"
        );
        let loser = if owners[0] { &b } else { &a };
        assert_eq!(
            loser.conflicts.len(),
            1,
            "the other app reports the conflict"
        );
        assert_eq!(
            loser.retries, 1,
            "its claim failed the compare and was planned again"
        );
        let index = Ownership::load(&store).await.unwrap();
        assert_eq!(
            index.owners.get(&key).map(String::as_str),
            Some(if owners[0] { "a" } else { "b" })
        );
        assert!(index.resource_version.is_some(), "the index is stored");
    }

    #[tokio::test]
    async fn an_object_another_app_owns_is_never_pruned() {
        // Two inventories listing one object, as an older store could hold: the index (built
        // from the inventories, first app by name) gives it to `a`.
        let store = MemoryStore::new();
        let rev = Revision("r".into());
        let shared = cm("shared", "same");
        for app in ["a", "b"] {
            let inv = Inventory {
                app: app.into(),
                revision: Some(rev.clone()),
                source: Some("test".into()),
                entries: set(std::slice::from_ref(&shared)),
                retained: BTreeSet::new(),
                resource_version: None,
            };
            store
                .commit(vec![
                    Write::PutRecord {
                        record: inv.to_record_text().unwrap(),
                        precondition: Precondition::Absent,
                    },
                    Write::Put {
                        object: shared.clone(),
                        precondition: Precondition::Any,
                        json: None,
                    },
                ])
                .await
                .unwrap();
        }
        // `b` drops it from Git: not deleted, since `a` owns it; `b` lets go of it.
        let out = sync(&store, &req("b", &rev, &set(&[cm("other", "1")])))
            .await
            .unwrap();
        let step = out
            .plan
            .steps
            .iter()
            .find(|s| s.key == shared.key())
            .unwrap();
        assert_eq!(step.action, Action::Delete);
        assert_eq!(
            step.skipped.as_deref(),
            Some("owned by app a, which declares it")
        );
        assert!(store.get(&shared.key()).await.unwrap().is_some(), "kept");
        assert!(
            !Inventory::load(&store, "b")
                .await
                .unwrap()
                .entries
                .contains_key(&shared.key())
        );
        // `a` drops it: a prune like any other, and the index lets it go.
        sync(&store, &req("a", &rev, &set(&[cm("a-own", "1")])))
            .await
            .unwrap();
        assert!(
            store.get(&shared.key()).await.unwrap().is_none(),
            "pruned by its owner"
        );
        let index = Ownership::load(&store).await.unwrap();
        assert!(!index.owners.contains_key(&shared.key()));
        assert_eq!(
            index.owners.get(&cm("a-own", "").key()).map(String::as_str),
            Some("a")
        );
    }

    #[tokio::test]
    async fn a_conflicting_writer_between_read_and_commit_is_retried() {
        // A store that lets one foreign write in just before the first commit.
        let store = Hooked::new(|n| match n {
            0 => vec![cm("a", "foreign")],
            _ => vec![],
        });
        let rev = Revision("r".into());
        let out = sync(&store, &req("app", &rev, &set(&[cm("a", "git")])))
            .await
            .unwrap();
        assert_eq!(out.retries, 1);
        let live = store.get(&cm("a", "").key()).await.unwrap().unwrap();
        assert_eq!(live.get("data"), Some(&json!({"v": "git"})));
    }

    #[tokio::test]
    async fn an_object_changed_before_every_commit_is_set_aside_and_the_rest_applied() {
        // A store where another writer changes `busy` just before every commit, as a writer
        // hammering one object would.
        let store = Hooked::new(|n| vec![cm("busy", &format!("foreign-{n}"))]);
        let rev = Revision("r".into());
        let desired = set(&[cm("a", "git"), cm("busy", "git"), cm("c", "git")]);
        let out = sync(&store, &req("app", &rev, &desired)).await.unwrap();
        assert_eq!(out.contested, [cm("busy", "").key()].into());
        let step = out
            .plan
            .steps
            .iter()
            .find(|s| s.key == cm("busy", "").key())
            .unwrap();
        assert_eq!(step.skipped.as_deref(), Some(CONTESTED));
        for name in ["a", "c"] {
            let live = store.get(&cm(name, "").key()).await.unwrap().unwrap();
            assert_eq!(
                live.get("data"),
                Some(&json!({"v": "git"})),
                "{name} applied"
            );
        }
        // Not claimed while contested: the inventory lists what was applied.
        let inv = Inventory::load(&store, "app").await.unwrap();
        assert_eq!(inv.revision, Some(rev.clone()));
        assert!(!inv.entries.contains_key(&cm("busy", "").key()));
        assert_eq!(inv.entries.len(), 2);
    }

    #[tokio::test]
    async fn objects_created_by_a_commit_that_stopped_part_way_are_still_pruned() {
        // A store that splits commits of more than 4 writes, like etcd beyond one transaction,
        // and whose process dies after the first part of the next split commit.
        let store = Hooked::new(|_| vec![]).splitting_at(4);
        let rev = Revision("r1".into());
        let ten: Vec<Object> = (0..10).map(|i| cm(&format!("o{i}"), "1")).collect();
        let err = sync(&store, &req("app", &rev, &set(&ten))).await;
        assert!(err.is_err(), "the first sync died part way");
        let live = store.list(&Selector::default()).await.unwrap().objects;
        assert_eq!(live.len(), 4, "four objects were created before it died");
        // Every object it was creating is on record, and the revision is not applied whole.
        let inv = Inventory::load(&store, "app").await.unwrap();
        assert_eq!(inv.entries.len(), 10);
        assert_eq!(inv.revision, None);
        // They leave Git: a later sync prunes the four it created, and forgets the six it never
        // did.
        let rev2 = Revision("r2".into());
        sync(&store, &req("app", &rev2, &set(&[cm("kept", "1")])))
            .await
            .unwrap();
        let live: Vec<String> = store
            .list(&Selector::default())
            .await
            .unwrap()
            .objects
            .keys()
            .map(|k| k.name().to_string())
            .collect();
        assert_eq!(live, vec!["kept"]);
        let inv = Inventory::load(&store, "app").await.unwrap();
        assert_eq!(inv.entries.len(), 1);
        assert_eq!(inv.revision, Some(rev2));
    }

    #[tokio::test]
    async fn a_sync_planned_before_another_process_applied_a_newer_revision_writes_nothing() {
        let store = MemoryStore::new();
        let (b, c) = (Revision("b".into()), Revision("c".into()));
        let with = set(&[cm("x", "1"), cm("victim", "1")]);
        let without = set(&[cm("x", "1")]);
        let prune = PlanOptions {
            prune: true,
            allow_empty: false,
            adopt: false,
            prune_non_empty: false,
        };
        // A `driftless sync` read the inventory at b; then the agent applied c, which drops
        // `victim`.
        let seen = sync(
            &store,
            &Request {
                options: prune,
                ..req("app", &b, &with)
            },
        )
        .await
        .unwrap()
        .inventory
        .unwrap();
        sync(
            &store,
            &Request {
                options: prune,
                ..req("app", &c, &without)
            },
        )
        .await
        .unwrap();
        let before = store.revision().await.unwrap();
        // The late sync of b is refused whole: no resurrected victim, no rollback.
        let late = sync(
            &store,
            &Request {
                options: prune,
                inventory: Some(&seen),
                ..req("app", &b, &with)
            },
        )
        .await;
        match late {
            Err(Error::Superseded { found, .. }) => assert_eq!(found, Some(c.clone())),
            other => panic!("{other:?}"),
        }
        assert_eq!(store.revision().await.unwrap(), before, "nothing written");
        assert!(store.get(&cm("victim", "").key()).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_full_sync_that_writes_objects_compares_and_swaps_the_inventory() {
        let store = MemoryStore::new();
        let rev = Revision("r".into());
        let desired = set(&[cm("a", "1")]);
        let first = sync(&store, &req("app", &rev, &desired)).await.unwrap();
        let inv = first.inventory.unwrap();
        // Drift a periodic full pass finds: the object is written, and the inventory too (same
        // content), so that the pass's plan is checked against the inventory it was made with.
        store
            .commit(vec![Write::Put {
                object: cm("a", "drift"),
                precondition: Precondition::Any,
                json: None,
            }])
            .await
            .unwrap();
        let out = sync(
            &store,
            &Request {
                inventory: Some(&inv),
                ..req("app", &rev, &desired)
            },
        )
        .await
        .unwrap();
        let after = out.inventory.expect("the inventory was written");
        assert!(after.resource_version > inv.resource_version);
        assert_eq!(after.entries, inv.entries);
    }

    #[tokio::test]
    async fn a_full_sync_notices_that_its_cached_inventory_is_stale() {
        let store = MemoryStore::new();
        let rev = Revision("r".into());
        let desired = set(&[cm("a", "1"), cm("b", "1")]);
        let first = sync(&store, &req("app", &rev, &desired)).await.unwrap();
        let cached = first.inventory.unwrap();
        // Another process (a `driftless sync`, say) drops `b` and records it.
        let only_a = set(&[cm("a", "1")]);
        sync(&store, &req("app", &rev, &only_a)).await.unwrap();
        assert!(store.get(&cm("b", "").key()).await.unwrap().is_none());
        // A full pass with the stale copy must not believe `b` is still owned and declared
        // nowhere... it reads the current record (which no longer lists b) instead.
        let out = sync(
            &store,
            &Request {
                inventory: Some(&cached),
                ..req("app", &rev, &only_a)
            },
        )
        .await
        .unwrap();
        let inv = out.inventory.expect("read fresh, so returned");
        assert!(!inv.entries.contains_key(&cm("b", "").key()));
        assert_eq!(
            inv.resource_version,
            Inventory::load(&store, "app")
                .await
                .unwrap()
                .resource_version
        );
    }

    #[test]
    fn all_in_answers_alike_for_a_few_keys_and_for_many() {
        let key = |i: usize| ObjectKey::new("", "ConfigMap", "ns", format!("c{i:03}"));
        let map: BTreeMap<ObjectKey, ()> = (0..100).map(|i| (key(i * 2), ())).collect();
        let set = |ids: &[usize]| ids.iter().map(|i| key(*i)).collect::<BTreeSet<_>>();
        // A few keys (a lookup each) and many (a walk in step).
        for (ids, expected) in [
            (vec![4], true),
            (vec![5], false),
            (vec![0, 198], true),
            (vec![0, 199], false),
            ((0..50).map(|i| i * 4).collect(), true),
            ((0..50).map(|i| i * 4 + 1).collect(), false),
            ((0..100).map(|i| i * 2).collect(), true),
            (vec![], true),
        ] {
            assert_eq!(all_in(set(&ids).iter(), &map), expected, "{ids:?}");
        }
    }

    #[tokio::test]
    async fn a_sync_given_what_the_last_found_as_declared_plans_only_what_moved() {
        let store = MemoryStore::new();
        let rev = Revision("r".into());
        let desired = set(&[cm("a", "1"), cm("b", "1"), cm("c", "1"), cm("d", "1")]);
        let keys: Vec<ObjectKey> = desired.keys().cloned().collect();
        // Each sync is given the inventory and what the one before found as declared.
        #[derive(Default)]
        struct Kept {
            inventory: Option<Inventory>,
            verified: Option<Verified>,
        }
        let mut kept = Kept::default();
        async fn pass(
            store: &MemoryStore,
            rev: &Revision,
            desired: &BTreeMap<ObjectKey, Object>,
            kept: &mut Kept,
        ) -> Outcome {
            let out = sync(
                store,
                &Request {
                    inventory: kept.inventory.as_ref(),
                    verified: kept.verified.as_ref(),
                    ..req("app", rev, desired)
                },
            )
            .await
            .unwrap();
            if let Some(i) = &out.inventory {
                kept.inventory = Some(i.clone());
            }
            kept.verified
                .get_or_insert_default()
                .apply(out.verified.clone());
            out
        }
        let run =
            async |store: &MemoryStore, kept: &mut Kept| pass(store, &rev, &desired, kept).await;
        // Created: the store keeps what it is given, so each is as declared at the version the
        // write gave it, and the next pass plans nothing.
        let first = run(&store, &mut kept).await;
        assert_eq!(first.plan.summary().create, 4);
        assert_eq!(first.verified.found, first.written);
        assert_eq!(kept.verified.as_ref().map(Verified::len), Some(4));
        let second = run(&store, &mut kept).await;
        assert!(second.plan.steps.is_empty());
        assert_eq!(second.still_unchanged.len(), 4);
        // Out of band: b changed, c deleted. Only they are read and planned; b is reverted, c
        // created again.
        store
            .commit(vec![
                Write::Put {
                    object: cm("b", "drift"),
                    precondition: Precondition::Any,
                    json: None,
                },
                Write::Delete {
                    key: keys[2].clone(),
                    precondition: Precondition::Any,
                },
            ])
            .await
            .unwrap();
        let third = run(&store, &mut kept).await;
        let planned: Vec<(&str, Action)> = third
            .plan
            .steps
            .iter()
            .map(|s| (s.key.name(), s.action))
            .collect();
        assert_eq!(planned, [("b", Action::Update), ("c", Action::Create)]);
        assert_eq!(
            third.still_unchanged,
            [keys[0].clone(), keys[3].clone()].into()
        );
        assert_eq!(
            store.get(&keys[1]).await.unwrap().unwrap().get("data"),
            Some(&json!({"v": "1"}))
        );
        assert!(store.get(&keys[2]).await.unwrap().is_some());
        // b and c were written as planned: nothing is planned at all.
        let fifth = run(&store, &mut kept).await;
        assert!(fifth.plan.steps.is_empty());
        assert_eq!(fifth.still_unchanged.len(), 4);
        assert_eq!(fifth.plan.summary(), diff::Summary::default());
        // So a sync has nothing to do, found without reading an object; not so for a part of
        // the app, nor once an object moved.
        let whole = async |kept: &Kept| -> bool {
            let r = Request {
                inventory: kept.inventory.as_ref(),
                verified: kept.verified.as_ref(),
                ..req("app", &rev, &desired)
            };
            nothing_moved(&store, &r).await.unwrap()
        };
        assert!(whole(&kept).await);
        let scope: BTreeSet<ObjectKey> = [keys[0].clone()].into();
        let part = Request {
            inventory: kept.inventory.as_ref(),
            verified: kept.verified.as_ref(),
            scope: Some(&scope),
            ..req("app", &rev, &desired)
        };
        assert!(!nothing_moved(&store, &part).await.unwrap());
        let other = Revision("other".into());
        let newer = Request {
            inventory: kept.inventory.as_ref(),
            verified: kept.verified.as_ref(),
            ..req("app", &other, &desired)
        };
        assert!(!nothing_moved(&store, &newer).await.unwrap());
        store
            .commit(vec![Write::Put {
                object: cm("d", "drift"),
                precondition: Precondition::Any,
                json: None,
            }])
            .await
            .unwrap();
        assert!(!whole(&kept).await);
        let moved = run(&store, &mut kept).await;
        assert_eq!(moved.plan.summary().update, 1);
        // Held for another inventory record (another process wrote it): not used.
        kept.verified.as_mut().unwrap().inventory_rv = Some(u64::MAX);
        let sixth = run(&store, &mut kept).await;
        assert_eq!(sixth.plan.steps.len(), 4);
        assert!(sixth.still_unchanged.is_empty());
    }

    #[tokio::test]
    async fn scoped_syncs_touch_only_their_keys() {
        let store = MemoryStore::new();
        let rev = Revision("r".into());
        let desired = set(&[cm("a", "1"), cm("b", "1")]);
        sync(&store, &req("app", &rev, &desired)).await.unwrap();
        // Both drift; only `a` is in scope.
        store
            .commit(vec![
                Write::Put {
                    object: cm("a", "drift"),
                    precondition: Precondition::Any,
                    json: None,
                },
                Write::Put {
                    object: cm("b", "drift"),
                    precondition: Precondition::Any,
                    json: None,
                },
            ])
            .await
            .unwrap();
        let scope: BTreeSet<ObjectKey> = [cm("a", "").key()].into();
        let out = sync(
            &store,
            &Request {
                scope: Some(&scope),
                ..req("app", &rev, &desired)
            },
        )
        .await
        .unwrap();
        assert_eq!(out.plan.steps.len(), 1);
        assert_eq!(
            store
                .get(&cm("a", "").key())
                .await
                .unwrap()
                .unwrap()
                .get("data"),
            Some(&json!({"v": "1"}))
        );
        assert_eq!(
            store
                .get(&cm("b", "").key())
                .await
                .unwrap()
                .unwrap()
                .get("data"),
            Some(&json!({"v": "drift"}))
        );
    }

    /// `desired` synced at `rev` into two fresh SQLite stores, the first given `ahead`:
    /// (their folder, that store, the other).
    async fn synced_with_and_without(
        desired: &BTreeMap<ObjectKey, Object>,
        rev: &Revision,
        ahead: &EntriesAhead,
    ) -> (
        tempfile::TempDir,
        store::sqlite::SqliteStore,
        store::sqlite::SqliteStore,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let open = |name: &str| {
            store::sqlite::SqliteStore::open(&dir.path().join(name), Default::default()).unwrap()
        };
        let (with, without) = (open("a.db"), open("b.db"));
        sync(
            &with,
            &Request {
                entries_ahead: Some(ahead),
                ..req("app", rev, desired)
            },
        )
        .await
        .unwrap();
        sync(&without, &req("app", rev, desired)).await.unwrap();
        (dir, with, without)
    }

    /// The entries' text made ahead by the digest's thread: the digest is the one made without
    /// it, and a full sync of exactly that set writes the text as it is (seen in the stored
    /// record's raw text: a space the sync itself would not write) and takes it; the
    /// inventory reads back as the one a sync without it writes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn entries_made_ahead_are_written_by_the_sync_of_exactly_that_set() {
        let desired = set(&[cm("a", "1"), cm("b", "2"), cm("c", "3")]);
        let rev = Revision("r1".into());
        let ahead = EntriesAhead::default();
        let digest = desired_digest_ahead(&desired, "settings", &ahead);
        assert_eq!(digest, desired_digest_here(&desired, "settings"));
        assert_eq!(digest, desired_digest(&desired, "settings"));
        let made = ahead.take().await.unwrap();
        let mut own = Vec::new();
        write_entries(&desired, &mut own).unwrap();
        assert_eq!(
            String::from_utf8(made.json.clone()).unwrap(),
            String::from_utf8(own).unwrap()
        );
        // Where each object is in it, and where its metadata closes.
        assert_eq!(made.spans.len(), desired.len());
        for (o, span) in desired.values().zip(&made.spans) {
            let text = &made.json[span.start as usize..span.end as usize];
            assert_eq!(text, o.to_json().as_bytes());
            let close = span.meta_close.unwrap() as usize;
            let meta = serde_json::to_string(o.metadata()).unwrap();
            assert!(made.json[..=close].ends_with(meta.as_bytes()));
        }

        // The same JSON with a space after its first colon: a text the sync did not make.
        let spaced = String::from_utf8(made.json)
            .unwrap()
            .replacen("\":", "\": ", 1);
        let ahead = EntriesAhead::default();
        // Without where each object is (nothing lent to the writes).
        ahead.put(AheadText {
            json: spaced.into_bytes(),
            spans: Vec::new(),
        });
        let (_dir, with, without) = synced_with_and_without(&desired, &rev, &ahead).await;
        assert!(ahead.take().await.is_none(), "the sync took the text");
        let key = Inventory::record_key("app");
        let (text, _) = with.get_json(&key).await.unwrap().unwrap();
        assert!(
            text.contains("\"entries\":[{\"apiVersion\": \"v1\""),
            "{text}"
        );
        let (a, b) = (
            Inventory::load(&with, "app").await.unwrap(),
            Inventory::load(&without, "app").await.unwrap(),
        );
        assert_eq!(
            (a.entries, a.revision, a.retained),
            (b.entries, b.revision, b.retained)
        );
    }

    /// The objects a full sync creates are written from their JSON in the text made ahead
    /// (lent to their writes) and stored byte for byte as a sync without it stores them, the
    /// store's fields put where serializing puts them: text to escape, a declared store field
    /// (then serialized), several parts of the digest (300 objects).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn objects_written_from_the_text_made_ahead_are_stored_as_serialized() {
        let mut objects: Vec<Object> = (0..300)
            .map(|i| cm(&format!("c{i:03}"), &format!("v\"{i}\u{e9}\n")))
            .collect();
        objects[7]
            .metadata_mut()
            .insert("generation".into(), json!(7));
        objects[8]
            .metadata_mut()
            .insert("labels".into(), json!({"a/b": "}{"}));
        let desired = set(&objects);
        let rev = Revision("r1".into());
        let ahead = EntriesAhead::default();
        desired_digest_ahead(&desired, "settings", &ahead);
        let (_dir, with, without) = synced_with_and_without(&desired, &rev, &ahead).await;
        // The time of creation aside (the two syncs may be a second apart).
        let unstamped = |text: String| {
            let at = text.find("\"creationTimestamp\":\"").unwrap() + 21;
            let end = at + text[at..].find('"').unwrap();
            format!("{}{}", &text[..at], &text[end..])
        };
        for key in desired.keys() {
            let (a, _) = with.get_json(key).await.unwrap().unwrap();
            let (b, _) = without.get_json(key).await.unwrap().unwrap();
            assert_eq!(unstamped(a), unstamped(b), "{key}");
        }
    }

    /// The text made ahead is lent to the writes of the very objects declared, in one walk in
    /// key order: not to an equal object that is not the declared one, nor to a delete, nor
    /// when the spans do not cover the set; what is lent is each object's JSON, into which a
    /// stamp goes as it would be serialized.
    #[tokio::test]
    async fn the_text_made_ahead_is_lent_to_the_writes_of_the_objects_declared() {
        let desired = set(&[cm("a", "1"), cm("b", "2"), cm("c", "3"), cm("d", "4")]);
        let ahead = EntriesAhead::default();
        desired_digest_ahead(&desired, "settings", &ahead);
        let made = ahead.take().await.unwrap();
        let inv = Inventory {
            app: "app".into(),
            revision: None,
            source: None,
            entries: desired.clone(),
            retained: BTreeSet::new(),
            resource_version: None,
        };
        let (record, at) = inv.to_record_text_around(made.json.clone()).unwrap();
        let put = |o: &Object| Write::Put {
            object: o.clone(),
            precondition: Precondition::Absent,
            json: None,
        };
        let writes = || {
            vec![
                put(&desired[&cm("a", "1").key()]),
                // Equal, not the declared object itself.
                put(&cm("b", "2")),
                Write::Delete {
                    key: cm("bb", "").key(),
                    precondition: Precondition::Any,
                },
                put(&desired[&cm("d", "4").key()]),
            ]
        };
        let mut lent = writes();
        lend_json(&mut lent, &desired, &made.spans, &record, at);
        let stamp = store::Stamp {
            resource_version: Some(3),
            generation: 1,
            created: json!("2026-12-06T00:00:00Z"),
        };
        let given: Vec<bool> = lent
            .iter()
            .map(|w| match w {
                Write::Put { object, json, .. } => json.as_ref().is_some_and(|json| {
                    assert_eq!(stamp.text_from(object, json), stamp.text(object));
                    true
                }),
                _ => false,
            })
            .collect();
        assert_eq!(given, [true, false, false, true]);
        let mut short = writes();
        lend_json(&mut short, &desired, &made.spans[1..], &record, at);
        assert!(
            short
                .iter()
                .all(|w| !matches!(w, Write::Put { json: Some(_), .. }))
        );
    }

    /// A sync whose new entries are not exactly the desired set (an object retained, not
    /// pruned; a scoped sync) leaves the text made ahead alone and writes its own: the retained
    /// entry stays in the inventory.
    #[tokio::test]
    async fn entries_made_ahead_are_not_written_for_another_set() {
        let store = MemoryStore::new();
        let keep = PlanOptions {
            prune: false,
            ..PlanOptions::default()
        };
        let (r1, r2) = (Revision("r1".into()), Revision("r2".into()));
        sync(
            &store,
            &Request {
                options: keep,
                ..req("app", &r1, &set(&[cm("a", "1"), cm("gone", "1")]))
            },
        )
        .await
        .unwrap();
        let desired = set(&[cm("a", "2")]);
        let ahead = EntriesAhead::default();
        desired_digest_ahead(&desired, "settings", &ahead);
        sync(
            &store,
            &Request {
                options: keep,
                entries_ahead: Some(&ahead),
                ..req("app", &r2, &desired)
            },
        )
        .await
        .unwrap();
        let inv = Inventory::load(&store, "app").await.unwrap();
        let names: Vec<&str> = inv.entries.keys().map(ObjectKey::name).collect();
        assert_eq!(names, ["a", "gone"]);
        assert_eq!(inv.retained.len(), 1);
        assert_eq!(inv.entries[&cm("a", "2").key()], cm("a", "2"));
    }

    /// A stored inventory that is JSON but not in the shape the sync writes (its spec or
    /// entries gone, a field of another type) is an error, never an inventory with fewer
    /// entries: the sync that reads it fails and prunes nothing. Found by attacking the
    /// SQLite store's records: a gzip of `{"spec": {}}` was read as owning nothing, and a
    /// sync without two objects pruned neither and reported Synced.
    #[tokio::test]
    async fn an_inventory_not_in_its_shape_fails_the_sync_and_prunes_nothing() {
        let store = MemoryStore::new();
        let (r1, r2) = (Revision("r1".into()), Revision("r2".into()));
        sync(
            &store,
            &req("app", &r1, &set(&[cm("a", "1"), cm("gone", "1")])),
        )
        .await
        .unwrap();
        for spec in [
            json!({}),
            json!({"revision": "r1", "entries": "a"}),
            json!({"revision": 5, "entries": []}),
            json!({"entries": [], "retained": {"a": 1}}),
            json!([]),
        ] {
            store
                .commit(vec![Write::Put {
                    object: Object::reserved(INVENTORY_KIND, "app", {
                        let mut m = Map::new();
                        m.insert("spec".into(), spec.clone());
                        m
                    }),
                    precondition: Precondition::Any,
                    json: None,
                }])
                .await
                .unwrap();
            let err = Inventory::load(&store, "app").await.unwrap_err();
            assert!(matches!(err, Error::Inventory { .. }), "{spec}: {err:?}");
            let err = sync(&store, &req("app", &r2, &set(&[cm("a", "1")])))
                .await
                .unwrap_err();
            assert!(matches!(err, Error::Inventory { .. }), "{spec}: {err:?}");
            let live = store.get(&cm("gone", "1").key()).await.unwrap();
            assert!(live.is_some(), "{spec}: nothing is pruned");
        }
    }

    /// The errors of a damaged inventory or ownership index name the field and position,
    /// never a value: an entry (here under `retained`) may be a Secret.
    #[test]
    fn errors_of_damaged_records_show_no_values() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "default"},
            "stringData": {"password": "HUNTER2-SUPER-SECRET"}});
        let record = |spec: Value| {
            let mut m = Map::new();
            m.insert("spec".into(), spec);
            Object::reserved(INVENTORY_KIND, "app", m)
        };
        let err = Inventory::from_record(
            "app",
            record(json!({"entries": [], "retained": [secret.clone()]})),
        )
        .unwrap_err();
        let shown = store::error_chain(&err);
        assert!(
            shown.contains("spec.retained[0] is not four strings"),
            "{shown}"
        );
        assert!(!shown.contains("HUNTER2"), "{shown}");
        let mut m = Map::new();
        m.insert("spec".into(), json!({"owners": [secret]}));
        let err = Ownership::from_record(&Object::reserved(OWNERSHIP_KIND, OWNERSHIP_NAME, m))
            .unwrap_err();
        let shown = store::error_chain(&err);
        assert!(
            shown.contains("spec.owners[0] is not five strings"),
            "{shown}"
        );
        assert!(!shown.contains("HUNTER2"), "{shown}");
    }
}
