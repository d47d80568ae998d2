//! [`Verified`](super::Verified) kept across processes: the `Verified` record.
//!
//! A new process (`driftless sync` again, an agent restarted) knows nothing of what the last one
//! found as declared, so without this record it reads and plans every object. The record says,
//! for one desired set (by digest, [`desired_digest`]) and one inventory record version, at which
//! live resourceVersion each declared object was last found as declared. It is written after a
//! full pass that wrote nothing it did not account for, and only ever used when the inventory
//! record is still the one it names and the desired set in force has its digest: then each
//! object whose resourceVersion has not moved since is as declared, as within one process (see
//! [`Verified`](super::Verified)). A record that is stale (an object moved since, another
//! revision applied) costs reads, never a wrong verdict: each entry is checked against the
//! store's current version before it is trusted.
//!
//! Stored in the reserved group as `Verified/<app>`: `spec.source` (the app's source identity), `spec.digest`, `spec.inventory` (the
//! inventory record's resourceVersion), `spec.status` (the status record's resourceVersion, whose
//! per-object health the objects skipped keep) and `spec.versions`, the verified resourceVersions in the
//! desired set's key order, run-length encoded as `[[version, count], ...]` (0: not verified).
//! After a cold sync every object has the commit's revision: one pair for any number of objects.
//! `spec.reuse` (optional): the [reuse key](crate::render::Prepared::reuse_key) of the files the
//! set was read from, when driftless read them alone: a new process whose revision has that
//! key takes up the set from the inventory record instead of parsing the revision again, once
//! the inventory's entries have the record's digest (they are then the set the key was read as).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::object::{Object, ObjectKey, RESERVED_GROUP};

use super::Verified;

/// Kind of the persisted verification records (one per app).
pub const VERIFIED_KIND: &str = "Verified";

/// What a process found as declared, as the next process reads it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Persisted {
    /// The app's source identity when it was written.
    pub source: String,
    /// [`desired_digest`] of the desired set it holds for.
    pub digest: String,
    /// The inventory record's resourceVersion it holds for.
    pub inventory: u64,
    /// The status record's resourceVersion whose per-object health it relies on: objects
    /// skipped keep the health that record gives them, so the record is used only while the
    /// status record is that one (`0`: none, never used).
    pub status: u64,
    /// Verified resourceVersion per desired key, in key order (0: not verified).
    pub versions: Vec<u64>,
    /// [`Prepared::reuse_key`](crate::render::Prepared::reuse_key) of what the desired set was
    /// read from, when it has one.
    pub reuse: Option<String>,
}

impl Persisted {
    /// The key of an app's record.
    pub fn record_key(app: &str) -> ObjectKey {
        ObjectKey::new(RESERVED_GROUP, VERIFIED_KIND, "", app)
    }

    /// The record of `verified` for `desired` (`None` when it holds for no stored inventory
    /// record), read from files with reuse key `reuse`.
    pub fn of(
        verified: &Verified,
        desired: &BTreeMap<ObjectKey, Object>,
        source: &str,
        digest: &str,
        status: u64,
        reuse: Option<&str>,
    ) -> Option<Self> {
        Some(Self {
            source: source.to_string(),
            digest: digest.to_string(),
            inventory: verified.inventory_rv?,
            status,
            versions: desired
                .keys()
                .map(|k| verified.entries.get(k).copied().unwrap_or(0))
                .collect(),
            reuse: reuse.map(str::to_string),
        })
    }

    /// The [`Verified`] it holds for `desired` (whose digest the caller has checked).
    pub fn verified(&self, desired: &BTreeMap<ObjectKey, Object>) -> Verified {
        Verified {
            inventory_rv: Some(self.inventory),
            entries: desired
                .keys()
                .zip(&self.versions)
                .filter(|(_, rv)| **rv != 0)
                .map(|(k, rv)| (k.clone(), *rv))
                .collect(),
        }
    }

    /// The record to store.
    pub fn to_record(&self, app: &str) -> Object {
        let mut runs: Vec<[u64; 2]> = Vec::new();
        for &v in &self.versions {
            match runs.last_mut() {
                Some([last, n]) if *last == v => *n += 1,
                _ => runs.push([v, 1]),
            }
        }
        let mut spec = json!({
            "source": self.source,
            "digest": self.digest,
            "inventory": self.inventory,
            "status": self.status,
            "versions": runs,
        });
        if let Some(reuse) = &self.reuse {
            spec["reuse"] = json!(reuse);
        }
        let mut body = Map::new();
        body.insert("spec".into(), spec);
        Object::reserved(VERIFIED_KIND, app, body)
    }

    /// Reads a record back; `None` when it is not one this version writes (then it is only
    /// ignored: the next full pass writes a new one).
    pub fn from_record(obj: &Object) -> Option<Self> {
        let spec = obj.get("spec")?;
        let text = |f: &str| spec.get(f).and_then(Value::as_str).map(str::to_string);
        let mut versions = Vec::new();
        for run in spec.get("versions")?.as_array()? {
            let [v, n] = run.as_array()?.as_slice() else {
                return None;
            };
            let (v, n) = (v.as_u64()?, usize::try_from(n.as_u64()?).ok()?);
            // A corrupt count must not allocate without end: no app declares a billion objects.
            if versions.len().saturating_add(n) > 1 << 24 {
                return None;
            }
            versions.extend(std::iter::repeat_n(v, n));
        }
        Some(Self {
            source: text("source")?,
            digest: text("digest")?,
            inventory: spec.get("inventory")?.as_u64()?,
            status: spec.get("status")?.as_u64()?,
            versions,
            reuse: match spec.get("reuse") {
                None => None,
                Some(r) => Some(r.as_str()?.to_string()),
            },
        })
    }
}

/// A digest of a desired set as declared, and of what else decides what a sync and a health
/// check make of it (`settings`: the ignore rules and plan options, as the caller writes them):
/// SHA-256 over driftless's version, `settings`, and each object's JSON in key order, in hex.
/// Equal digests mean the same declarations byte for byte. The texts are made on all cores
/// ([`crate::par::map_batched`]); the digest is the same as made one by one.
pub fn desired_digest(desired: &BTreeMap<ObjectKey, Object>, settings: &str) -> String {
    digest_on_all_cores(desired, settings, None)
}

/// [`desired_digest`] made on this thread alone (for a thread that works beside others, at a
/// low priority): the same digest.
pub fn desired_digest_here(desired: &BTreeMap<ObjectKey, Object>, settings: &str) -> String {
    let mut h = digest_head(settings);
    let mut text = String::new();
    for o in desired.values() {
        text.clear();
        text.push_str(&o.to_json());
        text.push('\0');
        h.update(text.as_bytes());
    }
    hex(h)
}

/// The JSON of a desired set's objects, made ahead of a sync by the thread that makes the
/// set's digest from the moment the set is read ([`desired_digest_ahead`]), beside the plan
/// (one core): a full sync whose inventory entries are exactly these objects waits for it and
/// writes it as it is ([`super::Request::entries_ahead`]) instead of serializing them again,
/// which took about 20 ms on both cores at 10,000 objects (3.2 MB) in a cold sync (issue 18).
/// Taken once. Every clone is the same slot.
#[derive(Clone, Debug, Default)]
pub struct EntriesAhead(Arc<AheadSlot>);

#[derive(Debug, Default)]
struct AheadSlot {
    state: Mutex<Ahead>,
    done: tokio::sync::Notify,
}

#[derive(Debug, Default)]
enum Ahead {
    /// Being made.
    #[default]
    Making,
    Made(AheadText),
    /// Taken, or given up (the thread ended without it).
    Gone,
}

impl EntriesAhead {
    /// The text, once made (waited for while it is being made): the objects' compact JSON in
    /// key order, joined by commas, and where each is. `None` when taken already or given up.
    pub async fn take(&self) -> Option<AheadText> {
        loop {
            // Registered before the look: a `put` between the two still wakes it.
            let done = self.0.done.notified();
            {
                let mut state = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
                match std::mem::replace(&mut *state, Ahead::Gone) {
                    Ahead::Made(json) => return Some(json),
                    Ahead::Gone => return None,
                    Ahead::Making => *state = Ahead::Making,
                }
            }
            done.await;
        }
    }

    /// Leaves `text` (what [`desired_digest_ahead`] makes) for the sync.
    pub(crate) fn put(&self, text: AheadText) {
        self.end(Ahead::Made(text));
    }

    /// Says it will not be made: a waiting sync makes the text itself.
    pub(crate) fn give_up(&self) {
        self.end(Ahead::Gone);
    }

    fn end(&self, to: Ahead) {
        {
            let mut state = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
            if matches!(*state, Ahead::Making) {
                *state = to;
            }
        }
        self.0.done.notify_waiters();
    }
}

/// What [`EntriesAhead`] holds: the desired set's objects as JSON, and where each one is.
#[derive(Debug, Default, PartialEq)]
pub struct AheadText {
    /// The objects' compact JSON ([`Object::write_json`]) in key order, joined by commas.
    pub json: Vec<u8>,
    /// Where each object's text is in `json`, in the same order: one per object, or none at
    /// all (`json` past 4 GiB).
    pub spans: Vec<EntrySpan>,
}

/// Where one object's JSON is in [`AheadText::json`]: bytes `start..end`, and the byte that
/// closes its `metadata` mapping ([`Object::write_json_marked`]), if it has one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EntrySpan {
    /// The first byte (`{`).
    pub start: u32,
    /// One past the last byte (`}`).
    pub end: u32,
    /// The `}` that closes `metadata`.
    pub meta_close: Option<u32>,
}

/// Gives the text up when dropped before it was left (the thread that makes it panicked).
struct GiveUpOnDrop<'a>(&'a EntriesAhead);

impl Drop for GiveUpOnDrop<'_> {
    fn drop(&mut self) {
        self.0.give_up();
    }
}

/// [`desired_digest`] (the same digest, made on all cores), leaving the objects' JSON in
/// `ahead` for the sync that applies the set ([`EntriesAhead`]): the texts the digest hashes,
/// kept.
pub fn desired_digest_ahead(
    desired: &BTreeMap<ObjectKey, Object>,
    settings: &str,
    ahead: &EntriesAhead,
) -> String {
    let _give_up = GiveUpOnDrop(ahead);
    digest_on_all_cores(desired, settings, Some(ahead))
}

/// [`desired_digest`], made on all cores a batch at a time (bounded memory) and hashed in
/// order: each part's texts joined by commas with where each ends, each text hashed with a
/// NUL after it. With `keep`, the texts joined by commas are left there for the sync.
fn digest_on_all_cores(
    desired: &BTreeMap<ObjectKey, Object>,
    settings: &str,
    keep: Option<&EntriesAhead>,
) -> String {
    let mut h = digest_head(settings);
    let mut json: Vec<u8> = Vec::new();
    let mut spans = Vec::with_capacity(if keep.is_some() { desired.len() } else { 0 });
    let mut spans_kept = true;
    let mut failed = false;
    let objects: Vec<&Object> = desired.values().collect();
    crate::par::map_batched(
        "desired digest",
        &objects,
        4096,
        256,
        |part| {
            let mut text = Vec::new();
            // Where each ends, and where its metadata closes (kept for the sync's writes).
            let mut ends = Vec::with_capacity(part.len());
            for (i, o) in part.iter().enumerate() {
                if i > 0 {
                    text.push(b',');
                }
                let meta_close = if keep.is_some() {
                    o.write_json_marked(&mut text).ok()?
                } else {
                    o.write_json(&mut text).ok()?;
                    None
                };
                ends.push((text.len(), meta_close));
            }
            Some((text, ends))
        },
        |made| match made {
            Some((text, ends)) if !failed => {
                let base = json.len() + usize::from(!json.is_empty());
                let mut start = 0;
                for (end, meta_close) in ends {
                    h.update(&text[start..end]);
                    h.update([0]);
                    if keep.is_some() {
                        let at = |i: usize| u32::try_from(base + i).ok();
                        match (at(start), at(end)) {
                            (Some(start), Some(end)) if spans_kept => spans.push(EntrySpan {
                                start,
                                end,
                                meta_close: meta_close.and_then(at),
                            }),
                            _ => spans_kept = false,
                        }
                    }
                    start = end + 1;
                }
                if keep.is_some() {
                    if !json.is_empty() {
                        json.push(b',');
                    }
                    json.extend_from_slice(&text);
                }
            }
            _ => failed = true,
        },
    );
    if failed {
        // A map of JSON values always serializes; were it not so, nothing is left ahead.
        return desired_digest_here(desired, settings);
    }
    if let Some(keep) = keep {
        if !spans_kept {
            spans = Vec::new();
        }
        keep.put(AheadText { json, spans });
    }
    hex(h)
}

/// The hash of a digest's head: driftless's version and the settings.
fn digest_head(settings: &str) -> Sha256 {
    let mut h = Sha256::new();
    h.update(env!("CARGO_PKG_VERSION").as_bytes());
    h.update([0]);
    h.update(settings.as_bytes());
    h.update([0]);
    h
}

fn hex(h: Sha256) -> String {
    h.finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sync that asks while the text is being made waits for it; one that asks after the
    /// thread ended without it (a panic: the guard gives it up) gets none and makes its own;
    /// it is taken once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn entries_ahead_are_waited_for_while_made_and_given_up_with_their_thread() {
        let ahead = EntriesAhead::default();
        let left = ahead.clone();
        let maker = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            left.put(AheadText {
                json: b"{}".to_vec(),
                spans: Vec::new(),
            });
        });
        assert_eq!(ahead.take().await.map(|t| t.json), Some(b"{}".to_vec()));
        assert_eq!(ahead.take().await, None, "taken once");
        maker.join().unwrap();

        let ahead = EntriesAhead::default();
        let left = ahead.clone();
        let maker = std::thread::spawn(move || {
            let _give_up = GiveUpOnDrop(&left);
            std::thread::sleep(std::time::Duration::from_millis(50));
            panic!("the thread that makes the text fails");
        });
        assert_eq!(ahead.take().await, None);
        assert!(maker.join().is_err());
    }

    fn set(n: usize) -> BTreeMap<ObjectKey, Object> {
        (0..n)
            .map(|i| {
                let o = Object::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c{i}"), "namespace": "ns"}, "data": {"i": i.to_string()}})).unwrap();
                (o.key(), o)
            })
            .collect()
    }

    #[test]
    fn the_digest_made_on_all_cores_or_on_one_is_the_one_made_one_by_one() {
        // Across batch and part boundaries (4096, 256), and empty.
        for n in [0, 1, 255, 257, 4097, 9000] {
            let desired = set(n);
            let mut h = Sha256::new();
            h.update(env!("CARGO_PKG_VERSION").as_bytes());
            h.update([0]);
            h.update(b"s");
            h.update([0]);
            for o in desired.values() {
                h.update(o.to_json().as_bytes());
                h.update([0]);
            }
            let want: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(desired_digest(&desired, "s"), want, "{n} objects");
            assert_eq!(desired_digest_here(&desired, "s"), want, "{n} objects");
        }
    }

    #[test]
    fn a_record_reads_back_as_written_and_runs_are_compact() {
        let desired = set(5);
        let keys: Vec<&ObjectKey> = desired.keys().collect();
        let mut v = Verified {
            inventory_rv: Some(9),
            ..Verified::default()
        };
        for k in &keys[..4] {
            v.entries.insert((*k).clone(), 7);
        }
        v.entries.insert(keys[2].clone(), 8);
        let digest = desired_digest(&desired, "s");
        let p = Persisted::of(&v, &desired, "src", &digest, 3, None).unwrap();
        assert_eq!(p.versions, vec![7, 7, 8, 7, 0]);
        let record = p.to_record("app");
        assert_eq!(record.key(), Persisted::record_key("app"));
        assert_eq!(
            record.get("spec").unwrap()["versions"],
            json!([[7, 2], [8, 1], [7, 1], [0, 1]])
        );
        let back = Persisted::from_record(&record).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.verified(&desired), v);
        let with_reuse = Persisted::of(&v, &desired, "src", &digest, 3, Some("k")).unwrap();
        let record = with_reuse.to_record("app");
        assert_eq!(record.get("spec").unwrap()["reuse"], json!("k"));
        assert_eq!(Persisted::from_record(&record).unwrap(), with_reuse);
        // Nothing stored for an inventory never written.
        assert!(Persisted::of(&Verified::default(), &desired, "s", &digest, 3, None).is_none());
    }

    #[test]
    fn the_digest_moves_with_any_declaration_and_with_the_settings() {
        let a = set(3);
        let d = desired_digest(&a, "s");
        assert_eq!(d, desired_digest(&set(3), "s"));
        assert_ne!(d, desired_digest(&a, "t"));
        assert_ne!(d, desired_digest(&set(4), "s"));
        let mut b = a.clone();
        let k = b.keys().next().unwrap().clone();
        let mut o = b[&k].clone();
        o.as_map_mut()
            .insert("data".into(), json!({"i": "changed"}));
        b.insert(k, o);
        assert_ne!(d, desired_digest(&b, "s"));
    }

    #[test]
    fn records_of_another_shape_are_ignored() {
        for spec in [
            json!({}),
            json!({"source": "s", "digest": "d", "inventory": 1, "status": 1, "versions": [[1]]}),
            json!({"source": "s", "digest": "d", "inventory": 1, "versions": []}),
            json!({"source": "s", "digest": "d", "inventory": -1, "versions": []}),
            json!({"source": "s", "digest": "d", "inventory": 1, "versions": [[1, 99999999999u64]]}),
            json!({"source": "s", "digest": "d", "inventory": 1, "status": 1, "versions": [], "reuse": 7}),
        ] {
            let mut body = Map::new();
            body.insert("spec".into(), spec.clone());
            let o = Object::reserved(VERIFIED_KIND, "a", body);
            assert_eq!(Persisted::from_record(&o), None, "{spec}");
        }
    }
}
