//! driftless's own records (inventories, app status, the ownership index, preview records) as
//! ConfigMaps in the store's `namespace`, at any size.
//!
//! One ConfigMap holds at most 1 MiB (`MaxConfigMapSize`, the total of `data` and
//! `binaryData`, `k8s.io/kubernetes/pkg/apis/core/validation`), and etcd refuses a request over
//! 1.5 MiB. An inventory of 10,000 objects is about 1 MB of JSON, an app status with 10,000
//! resources several. So a record ConfigMap, the **pointer**, named `<kind>.<name>`, holds one
//! of three layouts, the smallest that fits:
//!
//! - **inline:** the JSON under `data.object` (up to [`INLINE_MAX`] bytes: `kubectl get -o yaml`
//!   shows it as it is);
//! - **compressed:** the gzip of the JSON, base64, under `binaryData.object.json.gz` (up to
//!   [`PIECE_MAX`] compressed bytes);
//! - **sharded:** the gzip cut into pieces of [`PIECE_MAX`] bytes, each in its own ConfigMap
//!   (a **shard**, named after the pointer, the content's digest and its index), and under the
//!   pointer's `data.shards` the index `{"digest", "pieces", "bytes"}` (SHA-256 of the whole
//!   gzip, hex).
//!
//! **Shards first, the pointer last, reads only through the pointer:** a writer creates the
//! shards of the new content (content-addressed: the digest is in their names, so the shards
//! the pointer names now are never overwritten), then replaces the pointer under its
//! precondition, then deletes the shards no pointer names any more. A reader reads the pointer,
//! then the shards it names, and checks the digest. A writer that stops between the two steps
//! leaves shards nobody reads; a shard missing or altered makes the record unreadable
//! ([`Error::Corrupt`]), never a shorter one, and an inventory that cannot be read never leads
//! to a prune (the sync's rule).

use base64::Engine as _;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::Digest as _;

use super::{KubeStore, backend, code, conflict, parse_rv};
use crate::object::{Object, ObjectKey};
use crate::store::{Error, Precondition, RecordText, Result};

/// The label on the pointer ConfigMaps that hold driftless's own records; its value is the
/// record's kind in lower case.
pub const RECORD_LABEL: &str = "driftless.io/record";

/// The annotation on a pointer with the record's key as JSON (`{"group", "kind", "namespace",
/// "name"}`), so a listing learns the key without reading the shards.
pub const RECORD_KEY_ANNOTATION: &str = "driftless.io/record-key";

/// The label on a shard: a digest of its pointer's name (16 hex digits), so the shards of one
/// record are listed together.
pub const SHARD_OF_LABEL: &str = "driftless.io/shard-of";

/// The label on a shard: the first 16 hex digits of the digest of the content it is part of.
pub const SHARD_DIGEST_LABEL: &str = "driftless.io/shard-digest";

/// The data key of an inline record's JSON.
const INLINE_KEY: &str = "object";
/// The binaryData key of a compressed record's gzip.
const COMPRESSED_KEY: &str = "object.json.gz";
/// The data key of a sharded record's index.
const SHARDS_KEY: &str = "shards";
/// The binaryData key of a shard's piece.
const PIECE_KEY: &str = "piece";

/// The largest JSON kept inline, in bytes (256 KiB).
pub const INLINE_MAX: usize = 256 * 1024;

/// The largest piece of gzip in one ConfigMap, in bytes: 512 KiB, 683 KiB once base64 encoded,
/// well under the 1 MiB a ConfigMap holds.
pub const PIECE_MAX: usize = 512 * 1024;

/// The largest record read back, in bytes of JSON (256 MiB): a gzip that expands beyond it is
/// refused as corrupt rather than filling memory.
const MAX_RECORD_BYTES: u64 = 256 * 1024 * 1024;

/// How a record's JSON is laid out in ConfigMaps (see the module documentation).
#[derive(Debug, PartialEq, Eq)]
pub enum Layout {
    /// The JSON itself, in the pointer.
    Inline(String),
    /// Its gzip, in the pointer.
    Compressed(Vec<u8>),
    /// Its gzip in pieces, one per shard, in order; the pointer holds the index.
    Sharded(ShardIndex, Vec<Vec<u8>>),
}

/// A sharded record's index, kept in its pointer under `data.shards`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardIndex {
    /// SHA-256 of the whole gzip, 64 hex digits.
    pub digest: String,
    /// How many shards (pieces) there are.
    pub pieces: usize,
    /// The gzip's length, in bytes.
    pub bytes: usize,
}

/// Lays `json` out: inline when at most `inline_max` bytes, else gzip, in one piece when at
/// most `piece_max` bytes, else in pieces of `piece_max` bytes. Pure.
pub fn layout(json: String, inline_max: usize, piece_max: usize) -> Layout {
    if json.len() <= inline_max {
        return Layout::Inline(json);
    }
    // flate2's default level: the record must fit a ConfigMap, and is written once a pass.
    let gz = crate::store::gzip::compress(json.as_bytes(), 6);
    if gz.len() <= piece_max {
        return Layout::Compressed(gz);
    }
    let index = ShardIndex {
        digest: hex(&sha2::Sha256::digest(&gz)),
        pieces: gz.len().div_ceil(piece_max),
        bytes: gz.len(),
    };
    let pieces = gz.chunks(piece_max).map(<[u8]>::to_vec).collect();
    Layout::Sharded(index, pieces)
}

/// The JSON of a sharded record from its pieces (in order, `None` for a shard that was not
/// found), checked against the index. Pure.
///
/// # Errors
///
/// Why the pieces are not the record the index names: a shard missing, a length or digest
/// that differs, a gzip that does not expand.
pub fn join(
    index: &ShardIndex,
    pieces: Vec<Option<Vec<u8>>>,
) -> std::result::Result<String, String> {
    let mut gz = Vec::with_capacity(index.bytes);
    for (i, piece) in pieces.into_iter().enumerate() {
        let piece = piece.ok_or_else(|| {
            format!(
                "shard {} of {} is missing (a write that did not finish, or removed by hand)",
                i + 1,
                index.pieces
            )
        })?;
        gz.extend_from_slice(&piece);
    }
    if gz.len() != index.bytes {
        return Err(format!(
            "the shards hold {} bytes, the index says {}",
            gz.len(),
            index.bytes
        ));
    }
    let digest = hex(&sha2::Sha256::digest(&gz));
    if digest != index.digest {
        return Err(format!(
            "the shards' digest is {digest}, the index says {}",
            index.digest
        ));
    }
    gunzip(&gz)
}

/// The JSON a gzip holds, at most [`MAX_RECORD_BYTES`]. Pure.
fn gunzip(gz: &[u8]) -> std::result::Result<String, String> {
    crate::store::gzip::expand(gz, MAX_RECORD_BYTES)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The ConfigMap name of a record's pointer: `<kind>.<name>` (with the namespace between them
/// when the record has one), in lower case.
pub fn pointer_name(key: &ObjectKey) -> String {
    let kind = key.kind().to_ascii_lowercase();
    if key.namespace().is_empty() {
        format!("{kind}.{}", key.name())
    } else {
        format!("{kind}.{}.{}", key.namespace(), key.name())
    }
}

/// The value of [`SHARD_OF_LABEL`] for a pointer.
fn shard_of(pointer: &str) -> String {
    hex(&sha2::Sha256::digest(pointer.as_bytes()))[..16].to_string()
}

/// The name of shard `i` (from 0) of the content with `digest` under `pointer`:
/// `<pointer>.<digest16>.<i>`, or `shard.<hash of pointer>.<digest16>.<i>` when that would
/// pass the 253 characters a name may have.
fn shard_name(pointer: &str, digest: &str, i: usize) -> String {
    let name = format!("{pointer}.{}.{i}", &digest[..16]);
    if name.len() <= 253 {
        name
    } else {
        format!("shard.{}.{}.{i}", shard_of(pointer), &digest[..16])
    }
}

/// The record key a pointer ConfigMap names: its annotation, else (a record written before
/// the annotation) the key inside its inline JSON.
pub fn record_key(cm: &DynamicObject) -> Option<ObjectKey> {
    if let Some(k) = cm
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(RECORD_KEY_ANNOTATION))
    {
        return serde_json::from_str(k).ok();
    }
    let text = cm.data.get("data")?.get(INLINE_KEY)?.as_str()?;
    let value = serde_json::from_str::<Value>(text).ok()?;
    Object::from_value(value).ok().map(|o| o.key())
}

fn corrupt(key: &ObjectKey, why: String) -> Error {
    Error::Corrupt {
        key: key.clone(),
        source: why.into(),
    }
}

fn binary(cm: &DynamicObject, field: &str) -> Option<std::result::Result<Vec<u8>, String>> {
    let text = cm.data.get("binaryData")?.get(field)?.as_str()?;
    Some(
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| format!("binaryData.{field} is not base64: {e}")),
    )
}

impl KubeStore {
    /// The ConfigMaps of the records' namespace.
    pub(super) fn records(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.inner.client.clone(),
            &self.inner.options.namespace,
            &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap")),
        )
    }

    /// Reads one record (a reserved-group key) through its pointer. When a shard the pointer
    /// names is gone, the pointer is read once more (a writer may have replaced it since).
    pub(super) async fn get_record(&self, key: &ObjectKey) -> Result<Option<Object>> {
        let api = self.records();
        let name = pointer_name(key);
        let mut retried = false;
        loop {
            let Some(cm) = api.get_opt(&name).await.map_err(|e| backend("get", e))? else {
                return Ok(None);
            };
            match self.record_from(key, &cm).await {
                Err(Error::Corrupt { .. }) if !retried => {
                    let again = api.get_opt(&name).await.map_err(|e| backend("get", e))?;
                    let moved = again.as_ref().map(|c| &c.metadata.resource_version)
                        != Some(&cm.metadata.resource_version);
                    if !moved {
                        return self.record_from(key, &cm).await.map(Some);
                    }
                    retried = true;
                }
                r => return r.map(Some),
            }
        }
    }

    /// The resourceVersion of one record (its pointer's), read as metadata only: neither the
    /// pointer's data nor its shards are transferred. `None` when there is no such record.
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] when the API server fails or gives a resourceVersion that is not a
    /// decimal etcd revision (as every read does).
    pub(super) async fn record_version(&self, key: &ObjectKey) -> Result<Option<u64>> {
        let meta = self
            .records()
            .get_metadata_opt(&pointer_name(key))
            .await
            .map_err(|e| backend("get", e))?;
        match meta {
            Some(m) => parse_rv(m.metadata.resource_version.as_deref()),
            None => Ok(None),
        }
    }

    /// The record a pointer ConfigMap holds, with the pointer's resourceVersion.
    ///
    /// # Errors
    ///
    /// [`Error::Corrupt`] naming the ConfigMap and why (no layout, bad base64 or gzip, a shard
    /// missing, a digest that differs, JSON that is not an object); [`Error::Backend`] when a
    /// shard cannot be read.
    pub(super) async fn record_from(&self, key: &ObjectKey, cm: &DynamicObject) -> Result<Object> {
        let name = cm.metadata.name.clone().unwrap_or_default();
        let in_cm = |why: String| corrupt(key, format!("record ConfigMap {name}: {why}"));
        let data = cm.data.get("data");
        let text = if let Some(text) = data.and_then(|d| d.get(INLINE_KEY)).and_then(Value::as_str)
        {
            text.to_string()
        } else if let Some(gz) = binary(cm, COMPRESSED_KEY) {
            gunzip(&gz.map_err(&in_cm)?).map_err(&in_cm)?
        } else if let Some(index) = data.and_then(|d| d.get(SHARDS_KEY)).and_then(Value::as_str) {
            let index: ShardIndex = serde_json::from_str(index)
                .map_err(|e| in_cm(format!("data.{SHARDS_KEY} is not a shard index: {e}")))?;
            if index.digest.len() != 64 || index.pieces > 4096 {
                return Err(in_cm(format!("data.{SHARDS_KEY} is not a shard index")));
            }
            let api = self.records();
            let reads = (0..index.pieces).map(|i| {
                let api = api.clone();
                let shard = shard_name(&name, &index.digest, i);
                async move {
                    let cm = api.get_opt(&shard).await.map_err(|e| backend("get", e))?;
                    match cm.as_ref().map(|cm| binary(cm, PIECE_KEY)) {
                        None | Some(None) => Ok(None),
                        Some(Some(Ok(piece))) => Ok(Some(piece)),
                        Some(Some(Err(why))) => Err(corrupt(key, format!("shard {shard}: {why}"))),
                    }
                }
            });
            let pieces = futures_util::future::try_join_all(reads).await?;
            join(&index, pieces).map_err(&in_cm)?
        } else {
            return Err(in_cm(format!(
                "no data.{INLINE_KEY}, binaryData.{COMPRESSED_KEY} or data.{SHARDS_KEY}"
            )));
        };
        let mut object = crate::store::decode(key, &text)?;
        if let Some(rv) = parse_rv(cm.metadata.resource_version.as_deref())? {
            object
                .metadata_mut()
                .insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        Ok(object)
    }

    /// Writes one record: its shards first (when it needs them), then the pointer under
    /// `precondition`, then deletes the shards no pointer names any more.
    pub(super) async fn put_record(
        &self,
        key: &ObjectKey,
        object: Object,
        precondition: Precondition,
    ) -> Result<Object> {
        // Encoding a large record (an app status of 10,000 objects is a few MB) is CPU work:
        // off the async workers, which carry the reverts.
        let mut head = object.clone();
        let text = tokio::task::spawn_blocking(move || {
            let mut object = object;
            object.metadata_mut().remove("resourceVersion");
            object.to_json()
        })
        .await
        .map_err(|e| backend("commit", e))?;
        head.metadata_mut().remove("resourceVersion");
        let rv = self.write_record_text(key, text, precondition).await?;
        Ok(with_version(head, rv))
    }

    /// [`Self::put_record`] of a record given as text ([`RecordText`]): the same ConfigMaps,
    /// the text made from the record's head and its fields, no object built. Gives the
    /// record's head at its new resourceVersion.
    pub(super) async fn put_record_text(
        &self,
        record: RecordText,
        precondition: Precondition,
    ) -> Result<Object> {
        let key = record.key();
        let head = record.head();
        let text = {
            let head = head.clone();
            tokio::task::spawn_blocking(move || record.into_text(&head))
                .await
                .map_err(|e| backend("commit", e))?
        };
        let rv = self.write_record_text(&key, text, precondition).await?;
        Ok(with_version(head, rv))
    }

    /// Writes a record's text (no `resourceVersion` in it) as its pointer ConfigMap (and
    /// shards); gives the pointer's new resourceVersion.
    async fn write_record_text(
        &self,
        key: &ObjectKey,
        text: String,
        precondition: Precondition,
    ) -> Result<Option<u64>> {
        let name = pointer_name(key);
        let laid_out = tokio::task::spawn_blocking(move || layout(text, INLINE_MAX, PIECE_MAX))
            .await
            .map_err(|e| backend("commit", e))?;
        let key_json = serde_json::to_string(key).map_err(|e| backend("commit", e))?;
        let mut cm = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": self.inner.options.namespace,
                "labels": {RECORD_LABEL: key.kind().to_ascii_lowercase()},
                "annotations": {RECORD_KEY_ANNOTATION: key_json},
            },
        });
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
        let mut created = Vec::new();
        let mut keep = None;
        match laid_out {
            Layout::Inline(text) => cm["data"] = json!({INLINE_KEY: text}),
            Layout::Compressed(gz) => cm["binaryData"] = json!({COMPRESSED_KEY: b64(&gz)}),
            Layout::Sharded(index, pieces) => {
                for (i, piece) in pieces.iter().enumerate() {
                    let shard_name = shard_name(&name, &index.digest, i);
                    let shard = json!({
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {
                            "name": shard_name,
                            "namespace": self.inner.options.namespace,
                            "labels": {
                                SHARD_OF_LABEL: shard_of(&name),
                                SHARD_DIGEST_LABEL: &index.digest[..16],
                            },
                        },
                        "binaryData": {PIECE_KEY: b64(piece)},
                    });
                    let shard: DynamicObject =
                        serde_json::from_value(shard).map_err(|e| backend("commit", e))?;
                    match self.records().create(&PostParams::default(), &shard).await {
                        Ok(_) => created.push(shard_name),
                        // The same name is the same content (the digest is in it).
                        Err(e) if code(&e) == Some(409) => {}
                        Err(e) => {
                            self.delete_shards(&name, &created).await;
                            return Err(backend("commit", e));
                        }
                    }
                }
                keep = Some(index.digest[..16].to_string());
                cm["data"] = json!({
                    SHARDS_KEY: serde_json::to_string(&index).map_err(|e| backend("commit", e))?
                });
            }
        }
        let written = self.write_pointer(key, &name, cm, precondition).await;
        match &written {
            Ok(_) => self.collect_shards(&name, keep.as_deref()).await,
            // The pointer did not move: the shards written for it are read by nobody.
            Err(_) => self.delete_shards(&name, &created).await,
        }
        let stored = written?;
        parse_rv(stored.metadata.resource_version.as_deref())
    }

    /// Replaces (or creates, or applies) a pointer ConfigMap under `precondition`.
    async fn write_pointer(
        &self,
        key: &ObjectKey,
        name: &str,
        mut cm: Value,
        precondition: Precondition,
    ) -> Result<DynamicObject> {
        let api = self.records();
        let conflict = |found: String| conflict(key, precondition, found);
        Ok(match precondition {
            Precondition::Absent => {
                let obj: DynamicObject =
                    serde_json::from_value(cm).map_err(|e| backend("commit", e))?;
                match api.create(&PostParams::default(), &obj).await {
                    Err(e) if code(&e) == Some(409) => return Err(conflict("present".into())),
                    r => r.map_err(|e| backend("commit", e))?,
                }
            }
            Precondition::ResourceVersion(rv) => {
                cm["metadata"]["resourceVersion"] = Value::String(rv.to_string());
                let obj: DynamicObject =
                    serde_json::from_value(cm).map_err(|e| backend("commit", e))?;
                match api.replace(name, &PostParams::default(), &obj).await {
                    Err(e) if matches!(code(&e), Some(409 | 404)) => {
                        return Err(conflict(super::api_message(&e)));
                    }
                    r => r.map_err(|e| backend("commit", e))?,
                }
            }
            Precondition::Any => api
                .patch(
                    name,
                    &PatchParams::apply(&self.inner.options.field_manager).force(),
                    &Patch::Apply(&cm),
                )
                .await
                .map_err(|e| backend("commit", e))?,
        })
    }

    /// Deletes a record: its pointer under `precondition`, then every shard of it.
    pub(super) async fn delete_record(
        &self,
        key: &ObjectKey,
        precondition: Precondition,
    ) -> Result<Option<u64>> {
        let name = pointer_name(key);
        let deleted = self
            .delete_named(&self.records(), key, &name, precondition)
            .await?;
        self.collect_shards(&name, None).await;
        Ok(deleted)
    }

    /// Deletes the shards of `pointer` whose content digest is not `keep` (all of them when
    /// `keep` is `None`). A failure is logged, not returned: the record is whole either way,
    /// and the next write collects them.
    async fn collect_shards(&self, pointer: &str, keep: Option<&str>) {
        let params =
            ListParams::default().labels(&format!("{SHARD_OF_LABEL}={}", shard_of(pointer)));
        let stale: Vec<String> = match self.records().list_metadata(&params).await {
            Ok(list) => list
                .items
                .into_iter()
                .filter(|m| {
                    let digest = m
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(SHARD_DIGEST_LABEL));
                    keep.is_none() || digest.map(String::as_str) != keep
                })
                .filter_map(|m| m.metadata.name)
                .collect(),
            Err(e) => {
                tracing::warn!(pointer, error = %e, "Cannot list a record's shards; they are collected at its next write");
                return;
            }
        };
        self.delete_shards(pointer, &stale).await;
    }

    async fn delete_shards(&self, pointer: &str, names: &[String]) {
        for shard in names {
            if let Err(e) = self.records().delete(shard, &DeleteParams::default()).await
                && code(&e) != Some(404)
            {
                tracing::warn!(pointer, shard, error = %e, "Cannot delete a record's stale shard");
            }
        }
    }
}

/// What was written, at the pointer's resourceVersion (not read back: the shards of a large
/// record would be read, unpacked and parsed again for nothing).
fn with_version(mut object: Object, rv: Option<u64>) -> Object {
    let meta = object.metadata_mut();
    match rv {
        Some(rv) => meta.insert("resourceVersion".into(), Value::String(rv.to_string())),
        None => meta.remove("resourceVersion"),
    };
    object
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_records_stay_inline_larger_ones_are_compressed_then_sharded() {
        let small = "{\"a\":1}".to_string();
        assert_eq!(layout(small.clone(), 64, 32), Layout::Inline(small));
        let text: String = (0..2000).map(|i| format!("{{\"n\":{i}}},")).collect();
        let Layout::Compressed(gz) = layout(text.clone(), 64, 1 << 20) else {
            panic!("compressed")
        };
        assert_eq!(gunzip(&gz).unwrap(), text);
        let Layout::Sharded(index, pieces) = layout(text.clone(), 64, 100) else {
            panic!("sharded")
        };
        assert_eq!(index.pieces, pieces.len());
        assert!(pieces.len() > 1 && pieces.iter().all(|p| p.len() <= 100));
        let whole: Vec<Option<Vec<u8>>> = pieces.iter().cloned().map(Some).collect();
        assert_eq!(join(&index, whole).unwrap(), text);
    }

    #[test]
    fn a_missing_or_altered_shard_makes_the_record_unreadable_never_shorter() {
        let text: String = (0..2000).map(|i| format!("{{\"n\":{i}}},")).collect();
        let Layout::Sharded(index, pieces) = layout(text, 64, 100) else {
            panic!("sharded")
        };
        let mut missing: Vec<Option<Vec<u8>>> = pieces.iter().cloned().map(Some).collect();
        missing[1] = None;
        assert!(join(&index, missing).unwrap_err().contains("shard 2 of"));
        let mut altered: Vec<Option<Vec<u8>>> = pieces.iter().cloned().map(Some).collect();
        altered[0].as_mut().unwrap()[10] ^= 1;
        assert!(join(&index, altered).unwrap_err().contains("digest"));
        let mut short: Vec<Option<Vec<u8>>> = pieces.iter().cloned().map(Some).collect();
        short.last_mut().unwrap().as_mut().unwrap().pop();
        assert!(join(&index, short).unwrap_err().contains("bytes"));
    }

    #[test]
    fn shard_names_stay_within_253_characters() {
        let digest = "ab".repeat(32);
        assert_eq!(
            shard_name("inventory.web", &digest, 2),
            "inventory.web.abababababababab.2"
        );
        let long = format!("inventory.{}", "x".repeat(250));
        assert!(shard_name(&long, &digest, 9).len() <= 253);
    }
}
