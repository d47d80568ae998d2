//! Diff: normalize, compare, three-way merge, and plan (ARCHITECTURE.md section 6).
//!
//! Git owns the fields it declares. [`merge`] writes the declared fields onto the live object and
//! keeps everything else (status, server defaults, other writers' fields); it removes a field only
//! when driftless applied it before (it is in the inventory's last-applied copy) and Git no longer
//! declares it. An object has drifted exactly when the merge would change it, so the diff and the
//! apply can never disagree: re-applying an unchanged declaration writes nothing.
//!
//! Comparison rules: `status` is never compared; of `metadata` only labels and annotations are
//! owned; absent, `null`, `{}` and `[]` are equal; numbers compare by value (`1` equals `1.0`);
//! strings compare exactly. A Secret's `data` value `""` equals `null`, because Kubernetes stores
//! an empty byte string as `null` (gitops-engine's `wordpress` fixture).
//!
//! Secret values are masked in every rendering ([`mask_secrets`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::object::{Object, ObjectKey};

/// Metadata fields set by the store (or by a Kubernetes API server), never declared.
pub const SERVER_METADATA: &[&str] = &[
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "uid",
    "selfLink",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// One field that differs between the live object and what applying Git would make of it.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Change {
    /// Dotted path, with list items by name where they have one: `spec.replicas`,
    /// `spec.template.spec.containers[name=web].image`, `metadata.labels.app`, `spec.ports[0]`.
    pub path: String,
    /// The live value, `None` when absent. Masked for Secret data.
    pub live: Option<Value>,
    /// The value after applying Git, `None` when the field is to be removed. Masked for Secret
    /// data.
    pub desired: Option<Value>,
}

/// What a sync does with one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Declared, absent from the store.
    Create,
    /// Declared and present, and the merge changes it (drift, or a new declaration).
    Update,
    /// In the inventory, no longer declared, present in the store: pruned (when `prune` is on).
    Delete,
    /// Declared and present, and the merge changes nothing.
    Unchanged,
}

/// One step of a plan.
#[derive(Clone, Debug)]
pub struct Step {
    /// The object's identity.
    pub key: ObjectKey,
    /// What happens to it.
    pub action: Action,
    /// The object to write (for create and update): the merge of the declaration onto the live
    /// object. `None` for delete and unchanged, and once a sync has written it.
    pub target: Option<Object>,
    /// The live object the step was planned against (for update and delete; `None` for create,
    /// and for unchanged, which needs no copy).
    pub live: Option<Object>,
    /// Field-level differences of an update (empty otherwise: a create or delete concerns the
    /// whole object, which [`render_step`] shows from `target` and `live`).
    pub changes: Vec<Change>,
    /// Why a delete will not happen (`prune` disabled, or the empty-set guard), if so.
    pub skipped: Option<String>,
}

/// The ordered actions of one sync: creates and updates in dependency order (namespaces and
/// CRDs first), then deletes in reverse order.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Every declared or inventoried object, in the order a sync executes them.
    pub steps: Vec<Step>,
}

/// Counts of a plan's actions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Summary {
    /// Objects to create.
    pub create: usize,
    /// Objects to update.
    pub update: usize,
    /// Objects to delete (not counting skipped deletes).
    pub delete: usize,
    /// Objects already as declared.
    pub unchanged: usize,
    /// Writes that will not happen: deletes held back by `prune: false` or the empty-set
    /// guard, and reverts held back while another writer fights over an object.
    pub skipped: usize,
}

impl Plan {
    /// True when the sync would write nothing and nothing is left out of sync.
    pub fn is_noop(&self) -> bool {
        self.steps.iter().all(|s| s.action == Action::Unchanged)
    }

    /// Counts of each action.
    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for step in &self.steps {
            match (step.action, &step.skipped) {
                (Action::Create | Action::Update, Some(_)) => s.skipped += 1,
                (Action::Create, None) => s.create += 1,
                (Action::Update, None) => s.update += 1,
                (Action::Delete, None) => s.delete += 1,
                (Action::Delete, Some(_)) => s.skipped += 1,
                (Action::Unchanged, _) => s.unchanged += 1,
            }
        }
        s
    }
}

/// How a plan treats deletions.
#[derive(Clone, Copy, Debug)]
pub struct PlanOptions {
    /// Delete objects the inventory owns that Git no longer declares.
    pub prune: bool,
    /// Allow pruning everything the app owns when the desired set is empty.
    pub allow_empty: bool,
    /// Stores that apply declared fields (Kubernetes): take over an existing object that is
    /// not in the app's inventory even when it differs from Git, or carries another tool's
    /// tracking label (`sync.adopt`). Off: such an object is a conflict, reported, not
    /// written.
    pub adopt: bool,
    /// Stores that apply declared fields (Kubernetes): prune a Namespace or a
    /// CustomResourceDefinition even while it holds objects the app does not own, which go
    /// with it (`sync.pruneNonEmpty`). Off: such a prune is held and reported.
    pub prune_non_empty: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        Self {
            prune: true,
            allow_empty: false,
            adopt: false,
            prune_non_empty: false,
        }
    }
}

/// Plans a sync.
///
/// - `desired`: the declared objects (namespaces defaulted).
/// - `live`: the store's objects for at least every key of `desired` and `inventory`; a key
///   missing here is taken to be absent from the store, so the caller must pass a complete read.
/// - `inventory`: the last-applied copy of every object this app applied before.
///
/// Pure: no I/O. An empty `desired` with a non-empty inventory gives deletes marked skipped
/// unless `allow_empty` is set (the guard against pruning everything on incomplete data).
pub fn plan<'a>(
    desired: impl IntoIterator<Item = (&'a ObjectKey, &'a Object)>,
    live: &BTreeMap<ObjectKey, Object>,
    inventory: impl IntoIterator<Item = (&'a ObjectKey, &'a Object)>,
    opts: PlanOptions,
) -> Plan {
    let desired: BTreeMap<&ObjectKey, &Object> = desired.into_iter().collect();
    let inventory: BTreeMap<&ObjectKey, &Object> = inventory.into_iter().collect();
    // Each object is planned on its own: on all cores when there are many.
    let pairs: Vec<(&ObjectKey, &Object)> = desired.iter().map(|(k, o)| (*k, *o)).collect();
    let mut applies = crate::par::map("plan", &pairs, 256, |(key, declared)| {
        plan_one(key, declared, live.get(*key), inventory.get(*key).copied())
    });
    applies
        .sort_by(|a, b| (kind_rank(a.key.kind()), &a.key).cmp(&(kind_rank(b.key.kind()), &b.key)));
    let empty_guard = desired.is_empty() && !inventory.is_empty() && !opts.allow_empty;
    let mut deletes = Vec::new();
    for key in inventory.keys() {
        if desired.contains_key(*key) {
            continue;
        }
        let Some(live_obj) = live.get(*key) else {
            continue; // already gone: it simply leaves the inventory
        };
        let skipped = if !opts.prune {
            Some("prune is disabled (sync.prune: false)".to_string())
        } else if empty_guard {
            Some("refusing to prune every object of the app: the new desired set is empty (set sync.allowEmpty: true to allow)".to_string())
        } else {
            None
        };
        deletes.push(Step {
            key: (*key).clone(),
            action: Action::Delete,
            target: None,
            live: Some(live_obj.clone()),
            changes: Vec::new(),
            skipped,
        });
    }
    deletes.sort_by(|a, b| {
        (std::cmp::Reverse(kind_rank(a.key.kind())), &a.key)
            .cmp(&(std::cmp::Reverse(kind_rank(b.key.kind())), &b.key))
    });
    applies.extend(deletes);
    Plan { steps: applies }
}

/// Plans one declared object against its live copy and last-applied copy.
pub fn plan_one(
    key: &ObjectKey,
    declared: &Object,
    live: Option<&Object>,
    last_applied: Option<&Object>,
) -> Step {
    match live {
        None => Step {
            key: key.clone(),
            action: Action::Create,
            target: Some(for_create(declared)),
            live: None,
            changes: Vec::new(),
            skipped: None,
        },
        // Most objects of a resync are as declared: found so without building the merge.
        Some(_) if live.is_some_and(|l| merge_keeps(declared, l, last_applied)) => Step {
            key: key.clone(),
            action: Action::Unchanged,
            target: None,
            live: None,
            changes: Vec::new(),
            skipped: None,
        },
        Some(live_obj) => {
            let target = merge(declared, live_obj, last_applied);
            let changes = compare(live_obj, &target);
            if changes.is_empty() {
                Step {
                    key: key.clone(),
                    action: Action::Unchanged,
                    target: None,
                    live: None,
                    changes,
                    skipped: None,
                }
            } else {
                Step {
                    key: key.clone(),
                    action: Action::Update,
                    target: Some(target),
                    live: Some(live_obj.clone()),
                    changes,
                    skipped: None,
                }
            }
        }
    }
}

/// The object to create from a declaration: the declaration without `status` and without
/// store-set metadata.
pub fn for_create(declared: &Object) -> Object {
    let meta = declared.metadata();
    if declared.get("status").is_none()
        // The few fields of the object's metadata compared by name: hashing each of the eight
        // names looked for cost more.
        && !meta.keys().any(|k| SERVER_METADATA.contains(&k.as_str()))
    {
        // Nothing to take out: the declaration itself, shared.
        return declared.clone();
    }
    let mut out = declared.clone();
    out.as_map_mut().remove("status");
    let meta = out.metadata_mut();
    for f in SERVER_METADATA {
        meta.remove(*f);
    }
    out
}

/// Where a field the merge owns lives: at the top level of the object, or in its `metadata`.
#[derive(Clone, Copy)]
enum Site {
    Top,
    Metadata,
}

/// The walk [`merge`] and [`merge_keeps`] share: `f(site, field, declared, last_applied)` for
/// each field Git owns in `d` (every top-level field but `status` and the controller-owned
/// ones, and of `metadata` only `labels` and `annotations`, null when not declared), in
/// order, until `f` returns false; false then.
fn each_owned_field<'a>(
    d: &'a Map<String, Value>,
    last: Option<&'a Map<String, Value>>,
    controlled: &[&str],
    mut f: impl FnMut(Site, &'a str, &'a Value, Option<&'a Value>) -> bool,
) -> bool {
    static NULL: Value = Value::Null;
    for (k, dv) in d {
        match k.as_str() {
            "status" => {}
            k if controlled.contains(&k) => {}
            "metadata" => {
                let d_meta = dv.as_object();
                let l_meta = last
                    .and_then(|m| m.get("metadata"))
                    .and_then(Value::as_object);
                for field in ["labels", "annotations"] {
                    let dv = d_meta.and_then(|m| m.get(field)).unwrap_or(&NULL);
                    if !f(Site::Metadata, field, dv, l_meta.and_then(|m| m.get(field))) {
                        return false;
                    }
                }
            }
            _ => {
                if !f(Site::Top, k, dv, last.and_then(|m| m.get(k))) {
                    return false;
                }
            }
        }
    }
    true
}

/// The top-level fields [`merge`] removes: applied before (non-empty in `last`), declared no
/// more (absent or null in `d`), and neither `status`, `metadata`, `apiVersion`, `kind` nor
/// controller-owned.
fn removed_fields<'a>(
    d: &'a Map<String, Value>,
    last: Option<&'a Map<String, Value>>,
    controlled: &'a [&'a str],
) -> impl Iterator<Item = &'a str> + 'a {
    last.into_iter().flatten().filter_map(move |(k, lv)| {
        let kept = matches!(k.as_str(), "status" | "metadata" | "apiVersion" | "kind")
            || controlled.contains(&k.as_str());
        (!kept && d.get(k).is_none_or(Value::is_null) && !is_empty(lv)).then_some(k.as_str())
    })
}

/// Writes the declared fields onto `live`, keeping everything else, and removes the fields that
/// `last_applied` had and `declared` no longer has. See the module doc for the rules.
pub fn merge(declared: &Object, live: &Object, last_applied: Option<&Object>) -> Object {
    let mut out = live.clone();
    let d = declared.as_map();
    let last = last_applied.map(Object::as_map);
    let controlled = controller_owned(declared);
    each_owned_field(d, last, controlled, |site, k, dv, lv| {
        let target = match site {
            Site::Top => out.as_map_mut(),
            Site::Metadata => out.metadata_mut(),
        };
        merge_field(target, k, dv, lv);
        true
    });
    for k in removed_fields(d, last, controlled) {
        out.as_map_mut().remove(k);
    }
    out
}

/// True when [`merge`] would give `live` back unchanged: the same rules, walked without
/// writing or allocating (a no-op resync of 10,000 objects would otherwise copy each one).
/// `merge_keeps(d, l, a) == (merge(d, l, a) == *l)` for every input (property-tested).
pub fn merge_keeps(declared: &Object, live: &Object, last_applied: Option<&Object>) -> bool {
    let d = declared.as_map();
    let l = live.as_map();
    let last = last_applied.map(Object::as_map);
    let controlled = controller_owned(declared);
    each_owned_field(d, last, controlled, |site, k, dv, lv| {
        let target = match site {
            Site::Top => l,
            // merge makes a missing or non-mapping live metadata a mapping: a change.
            Site::Metadata => match l.get("metadata") {
                Some(Value::Object(m)) => m,
                _ => return false,
            },
        };
        field_keeps(target, k, dv, lv)
    }) && removed_fields(d, last, controlled).all(|k| !l.contains_key(k))
}

/// True when [`merge_field`] would leave `target` as it is.
fn field_keeps(target: &Map<String, Value>, k: &str, dv: &Value, last: Option<&Value>) -> bool {
    let last_nonempty = last.filter(|v| !is_empty(v));
    if matches!(dv, Value::Array(a) if a.is_empty()) {
        return target.get(k) == Some(dv);
    }
    if is_empty(dv) {
        // The whole field goes (null) or becomes `dv` (an empty mapping).
        let whole_goes = || !dv.is_null() && target.get(k) == Some(dv);
        return match (dv, last_nonempty) {
            (_, Some(lv)) => match (target.get(k), lv) {
                (Some(Value::Object(cur)), Value::Object(lv)) => {
                    if lv.keys().any(|lk| cur.contains_key(lk)) {
                        false
                    } else {
                        !cur.is_empty() || whole_goes()
                    }
                }
                (Some(_), _) => whole_goes(),
                (None, _) => true,
            },
            (Value::Null, None) => true,
            (_, None) => !target.get(k).is_none_or(Value::is_null),
        };
    }
    value_keeps(dv, target.get(k), last)
}

/// True when [`merge_value`] would give `cur` back.
fn value_keeps(dv: &Value, cur: Option<&Value>, last: Option<&Value>) -> bool {
    match dv {
        Value::Object(dm) => {
            let Some(Value::Object(c)) = cur else {
                return false;
            };
            let lm = last.and_then(Value::as_object);
            dm.iter()
                .all(|(k, v)| field_keeps(c, k, v, lm.and_then(|m| m.get(k))))
                && lm.is_none_or(|lm| {
                    lm.iter()
                        .all(|(k, lv)| dm.contains_key(k) || is_empty(lv) || !c.contains_key(k))
                })
        }
        Value::Array(da) => {
            let Some(ca) = cur.and_then(Value::as_array) else {
                return false;
            };
            list_keeps(da, ca, last.and_then(Value::as_array))
        }
        scalar => cur == Some(scalar),
    }
}

/// True when [`merge_list`] would give `ca` back.
fn list_keeps(da: &[Value], ca: &[Value], la: Option<&Vec<Value>>) -> bool {
    if keyed_by_name(da) && ca.iter().all(|v| item_name(v).is_some()) {
        let la = la.map(Vec::as_slice).unwrap_or_default();
        let named = |list: &'_ [Value], name: &str| -> Option<usize> {
            list.iter().position(|v| item_name(v) == Some(name))
        };
        for c in ca {
            let name = item_name(c).unwrap_or_default();
            let last = named(la, name).map(|i| &la[i]);
            match named(da, name) {
                Some(i) if !value_keeps(&da[i], Some(c), last) => return false,
                Some(_) => {}
                // Applied before and no longer declared: merge removes it.
                None if last.is_some() => return false,
                None => {}
            }
        }
        // A declared item the live list lacks is appended.
        return da
            .iter()
            .all(|d| named(ca, item_name(d).unwrap_or_default()).is_some());
    }
    ca.len() == da.len()
        && da.iter().enumerate().all(|(i, d)| {
            let last = la.filter(|l| l.len() == da.len()).and_then(|l| l.get(i));
            value_keeps(d, ca.get(i), last)
        })
}

/// Merges one declared field `dv` into `target[k]`, with `last` the last-applied value there.
fn merge_field(target: &mut Map<String, Value>, k: &str, dv: &Value, last: Option<&Value>) {
    let last_nonempty = last.filter(|v| !is_empty(v));
    // A list declared empty is owned, as server-side apply treats an atomic list: live items
    // are drift (a LoadBalancer's source ranges filled by hand), whatever was applied before.
    if matches!(dv, Value::Array(a) if a.is_empty()) {
        target.insert(k.to_string(), dv.clone());
        return;
    }
    if is_empty(dv) {
        match (dv, last_nonempty) {
            // Git declared content here before and now declares none: remove what we applied.
            (_, Some(lv)) => {
                let remove_whole = match (target.get_mut(k), lv) {
                    (Some(Value::Object(cur)), Value::Object(lv)) => {
                        for lk in lv.keys() {
                            cur.remove(lk);
                        }
                        cur.is_empty()
                    }
                    (Some(_), _) => true,
                    (None, _) => false,
                };
                if remove_whole {
                    if dv.is_null() {
                        target.remove(k);
                    } else {
                        target.insert(k.to_string(), dv.clone());
                    }
                }
            }
            // Nothing declared and nothing applied before.
            (Value::Null, None) => {}
            // A map declared empty declares no fields (server-side apply's rule; the API server
            // fills `strategy: {}` with defaults): written only where the field is absent
            // (`emptyDir: {}`), never over what is there.
            (_, None) => {
                if target.get(k).is_none_or(Value::is_null) {
                    target.insert(k.to_string(), dv.clone());
                }
            }
        }
        return;
    }
    let cur = target.get(k);
    let merged = merge_value(dv, cur, last);
    target.insert(k.to_string(), merged);
}

/// Merges a non-empty declared value onto the current value.
fn merge_value(dv: &Value, cur: Option<&Value>, last: Option<&Value>) -> Value {
    match dv {
        Value::Object(dm) => {
            let mut out = match cur {
                Some(Value::Object(c)) => c.clone(),
                _ => Map::new(),
            };
            let lm = last.and_then(Value::as_object);
            for (k, v) in dm {
                merge_field(&mut out, k, v, lm.and_then(|m| m.get(k)));
            }
            if let Some(lm) = lm {
                for (k, lv) in lm {
                    if !dm.contains_key(k) && !is_empty(lv) {
                        out.remove(k);
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(da) => {
            let ca = cur.and_then(Value::as_array);
            let la = last.and_then(Value::as_array);
            Value::Array(merge_list(da, ca, la))
        }
        scalar => scalar.clone(),
    }
}

/// The name of a list item, when it is a mapping with a string `name`.
fn item_name(v: &Value) -> Option<&str> {
    v.as_object()?.get("name")?.as_str()
}

/// True when every item has a distinct `name`: such lists (containers, env, volumes) are merged
/// by name, as Kubernetes' strategic merge patch does with its `name` merge key: declared items
/// are merged into the live item of the same name, live items that Git never declared (another
/// writer's) are kept, items applied before and no longer declared are removed, and the live
/// order is kept.
fn keyed_by_name(items: &[Value]) -> bool {
    let mut seen = std::collections::HashSet::new();
    !items.is_empty()
        && items
            .iter()
            .all(|v| item_name(v).is_some_and(|n| seen.insert(n)))
}

fn merge_list(da: &[Value], ca: Option<&Vec<Value>>, la: Option<&Vec<Value>>) -> Vec<Value> {
    if keyed_by_name(da) && ca.is_none_or(|c| c.iter().all(|v| item_name(v).is_some())) {
        let ca = ca.map(Vec::as_slice).unwrap_or_default();
        let la = la.map(Vec::as_slice).unwrap_or_default();
        let named = |list: &'_ [Value], name: &str| -> Option<usize> {
            list.iter().position(|v| item_name(v) == Some(name))
        };
        let mut out = Vec::with_capacity(da.len().max(ca.len()));
        // Live order is kept: the order of named items is not owned.
        for c in ca {
            let name = item_name(c).unwrap_or_default();
            let last = named(la, name).map(|i| &la[i]);
            match named(da, name) {
                Some(i) => out.push(merge_value(&da[i], Some(c), last)),
                // Applied before and no longer declared: removed.
                None if last.is_some() => {}
                // Another writer's item.
                None => out.push(c.clone()),
            }
        }
        for d in da {
            let name = item_name(d).unwrap_or_default();
            if named(ca, name).is_none() {
                let last = named(la, name).map(|i| &la[i]);
                out.push(merge_value(d, None, last));
            }
        }
        return out;
    }
    match ca {
        Some(ca) if ca.len() == da.len() => da
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let last = la.filter(|l| l.len() == da.len()).and_then(|l| l.get(i));
                merge_value(d, ca.get(i), last)
            })
            .collect(),
        _ => da.to_vec(),
    }
}

/// Top-level fields a Kubernetes controller fills in whatever Git says, so Git does not own
/// them even when it declares them: a ClusterRole with an `aggregationRule` gets its `rules`
/// from the aggregation controller (gitops-engine ignores them too).
pub fn controller_owned(obj: &Object) -> &'static [&'static str] {
    if obj.group() == "rbac.authorization.k8s.io"
        && obj.kind() == "ClusterRole"
        && obj.get("aggregationRule").is_some_and(|v| !is_empty(v))
    {
        &["rules"]
    } else {
        &[]
    }
}

/// True for absent-equivalent values: `null`, `{}` and `[]`.
pub fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// Equality under the comparison rules: empty values equal, numbers by value.
pub fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        _ if is_empty(a) && is_empty(b) => true,
        (Value::Number(x), Value::Number(y)) => numbers_equal(x, y),
        (Value::Object(x), Value::Object(y)) => {
            x.iter()
                .all(|(k, v)| equal(v, y.get(k).unwrap_or(&Value::Null)))
                && y.iter().all(|(k, v)| x.contains_key(k) || is_empty(v))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| equal(a, b))
        }
        _ => a == b,
    }
}

fn numbers_equal(x: &serde_json::Number, y: &serde_json::Number) -> bool {
    if let (Some(a), Some(b)) = (x.as_i64(), y.as_i64()) {
        return a == b;
    }
    if let (Some(a), Some(b)) = (x.as_u64(), y.as_u64()) {
        return a == b;
    }
    match (x.as_f64(), y.as_f64()) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// The owned view of an object, the part that is compared: everything but `status`, and of
/// `metadata` only name, namespace, labels and annotations. Secret `data` values `""` read as
/// `null`.
pub fn owned_view(obj: &Object) -> Value {
    let mut out = Map::new();
    for (k, v) in obj.as_map() {
        match k.as_str() {
            "status" => {}
            "metadata" => {
                let mut meta = Map::new();
                for f in ["name", "namespace", "labels", "annotations"] {
                    if let Some(v) = obj.metadata().get(f) {
                        meta.insert(f.into(), v.clone());
                    }
                }
                out.insert(k.clone(), Value::Object(meta));
            }
            "data" if obj.is_secret() => {
                let mut v = v.clone();
                if let Value::Object(m) = &mut v {
                    for val in m.values_mut() {
                        if val.as_str() == Some("") {
                            *val = Value::Null;
                        }
                    }
                }
                out.insert(k.clone(), v);
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

/// The field-level differences between `live` and `target` under the comparison rules (the
/// fields of [`owned_view`], compared in place without copying), masked when the object is a
/// Secret. Empty when they are equal.
pub fn compare(live: &Object, target: &Object) -> Vec<Change> {
    let (l, t) = (live.as_map(), target.as_map());
    let secret = live.is_secret() || target.is_secret();
    let null = Value::Null;
    let mut out = Vec::new();
    let mut path = String::new();
    let mut at = |p: &str, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<Change>| {
        path.clear();
        path.push_str(p);
        walk(a.unwrap_or(&null), b.unwrap_or(&null), &mut path, out);
    };
    let controlled = controller_owned(target);
    let mut keys: Vec<&String> = l.keys().collect();
    keys.extend(t.keys().filter(|k| !l.contains_key(*k)));
    for k in keys {
        match k.as_str() {
            "status" => {}
            k if controlled.contains(&k) => {}
            "metadata" => {
                for f in ["name", "namespace", "labels", "annotations"] {
                    let (a, b) = (live.metadata().get(f), target.metadata().get(f));
                    at(&format!("metadata.{f}"), a, b, &mut out);
                }
            }
            "data" if secret => match (
                l.get(k).and_then(Value::as_object),
                t.get(k).and_then(Value::as_object),
            ) {
                (Some(a), Some(b)) => {
                    // Kubernetes stores an empty byte string as null: "" equals null here.
                    fn norm(v: Option<&Value>) -> Option<&Value> {
                        match v {
                            Some(Value::String(s)) if s.is_empty() => None,
                            other => other,
                        }
                    }
                    let mut dk: Vec<&String> = a.keys().collect();
                    dk.extend(b.keys().filter(|x| !a.contains_key(*x)));
                    for d in dk {
                        at(
                            &format!("data.{d}"),
                            norm(a.get(d)),
                            norm(b.get(d)),
                            &mut out,
                        );
                    }
                }
                _ => at(k, l.get(k), t.get(k), &mut out),
            },
            _ => at(k, l.get(k), t.get(k), &mut out),
        }
    }
    if secret {
        for c in &mut out {
            if c.path.starts_with("data") || c.path.starts_with("stringData") {
                c.live = c.live.as_ref().map(mask_value);
                c.desired = c.desired.as_ref().map(mask_value);
            }
        }
    }
    out
}

fn walk(a: &Value, b: &Value, path: &mut String, out: &mut Vec<Change>) {
    if equal(a, b) {
        return;
    }
    let present = |v: &Value| (!is_empty(v)).then(|| v.clone());
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().collect();
            keys.extend(y.keys().filter(|k| !x.contains_key(*k)));
            for k in keys {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k);
                walk(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    path,
                    out,
                );
                path.truncate(len);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                let len = path.len();
                match (item_name(p), item_name(q)) {
                    (Some(n), Some(m)) if n == m => {
                        let _ = write!(path, "[name={n}]");
                    }
                    _ => {
                        let _ = write!(path, "[{i}]");
                    }
                }
                walk(p, q, path, out);
                path.truncate(len);
            }
        }
        _ if is_quantity_path(path) && quantities_equal(a, b) => {}
        _ => out.push(Change {
            path: path.clone(),
            live: present(a),
            desired: present(b),
        }),
    }
}

/// True for the fields Kubernetes types as `resource.Quantity` that manifests commonly set:
/// a container's `resources.requests`/`limits`, a PVC's or volume claim template's
/// `resources.requests`, a PersistentVolume's `capacity`, a ResourceQuota's `hard`.
fn is_quantity_path(path: &str) -> bool {
    let parent = path.rsplit_once('.').map_or("", |(p, _)| p);
    parent.ends_with("resources.requests")
        || parent.ends_with("resources.limits")
        || parent == "spec.capacity"
        || parent == "spec.hard"
}

/// True when both are Kubernetes quantities of the same value, written alike or not (`0.5` and
/// `500m`, `1Gi` and `1024Mi`, `1000` and `1k`): the API server stores a quantity in its
/// canonical form, so a declaration written another way is not drift. The grammar is
/// `k8s.io/apimachinery/pkg/api/resource/quantity.go`'s: a signed decimal number, then a
/// binary suffix (`Ki`..`Ei`), a decimal suffix (`n`, `u`, `m`, `k`, `M`..`E`) or a decimal
/// exponent (`e3`, `E-2`).
pub fn quantities_equal(a: &Value, b: &Value) -> bool {
    match (quantity(a), quantity(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// A quantity as `mantissa × 10^exponent` with no trailing zeros in the mantissa, or `None`
/// when `v` is not a quantity (or too large to compare exactly).
fn quantity(v: &Value) -> Option<(i128, i32)> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    let (sign, rest) = match text.strip_prefix('-') {
        Some(r) => (-1, r),
        None => (1, text.strip_prefix('+').unwrap_or(&text)),
    };
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return None;
    }
    let digits = format!("{whole}{fraction}");
    if digits.len() > 30 {
        return None;
    }
    let mut mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    let mut exponent = -(fraction.len() as i32);
    let binary = |power: u32| -> Option<i128> { 1i128.checked_shl(power) };
    match suffix {
        "" => {}
        "Ki" => mantissa = mantissa.checked_mul(binary(10)?)?,
        "Mi" => mantissa = mantissa.checked_mul(binary(20)?)?,
        "Gi" => mantissa = mantissa.checked_mul(binary(30)?)?,
        "Ti" => mantissa = mantissa.checked_mul(binary(40)?)?,
        "Pi" => mantissa = mantissa.checked_mul(binary(50)?)?,
        "Ei" => mantissa = mantissa.checked_mul(binary(60)?)?,
        "n" => exponent -= 9,
        "u" => exponent -= 6,
        "m" => exponent -= 3,
        "k" => exponent += 3,
        "M" => exponent += 6,
        "G" => exponent += 9,
        "T" => exponent += 12,
        "P" => exponent += 15,
        "E" => exponent += 18,
        s if s.starts_with(['e', 'E']) => exponent += s[1..].parse::<i32>().ok()?,
        _ => return None,
    }
    if mantissa == 0 {
        return Some((0, 0));
    }
    while mantissa % 10 == 0 {
        mantissa /= 10;
        exponent += 1;
    }
    Some((sign * mantissa, exponent))
}

/// Who last changed the field at `path` (a path of [`Change::path`]: `data.k`,
/// `spec.template.spec.containers[name=web].image`), from the live object's
/// `metadata.managedFields` (Kubernetes' field ownership: each entry names a `manager`, its
/// `operation` and `time`, and the fields it set in `fieldsV1`, where `f:<field>` is a field
/// and `k:{"name":"web"}` a list item by key). Managers in `except` (driftless's own) are
/// skipped; of the rest, the one with the latest `time` that owns the field or one of its
/// parents wins. `(manager, time)`; `None` when nothing names it (no managedFields: SQLite,
/// etcd; or a list item addressed by index).
pub fn who_changed(live: &Object, path: &str, except: &[&str]) -> Option<(String, String)> {
    let entries = live.metadata().get("managedFields")?.as_array()?;
    let mut keys: Vec<String> = Vec::new();
    for segment in path.split('.') {
        match segment.split_once('[') {
            Some((field, item)) => {
                keys.push(format!("f:{field}"));
                let item = item.strip_suffix(']')?;
                let (k, v) = item.split_once('=')?;
                keys.push(format!("k:{}", serde_json::json!({ k: v })));
            }
            None => keys.push(format!("f:{segment}")),
        }
    }
    let mut best: Option<(String, String)> = None;
    for e in entries {
        let manager = e.get("manager").and_then(Value::as_str).unwrap_or_default();
        if except.contains(&manager) {
            continue;
        }
        let mut here = e.get("fieldsV1")?;
        let mut owns = false;
        for k in &keys {
            match here.get(k) {
                Some(next) => {
                    here = next;
                    owns = true;
                }
                None => {
                    owns = false;
                    break;
                }
            }
        }
        if !owns {
            continue;
        }
        let time = e.get("time").and_then(Value::as_str).unwrap_or_default();
        if best.as_ref().is_none_or(|(_, t)| time > t.as_str()) {
            best = Some((manager.to_string(), time.to_string()));
        }
    }
    best
}

/// The apply order of kinds, after Helm's install order: namespaces, policies, accounts,
/// config, storage, CRDs, RBAC, services, workloads, then everything else.
fn kind_rank(kind: &str) -> usize {
    const ORDER: &[&str] = &[
        "Namespace",
        "NetworkPolicy",
        "ResourceQuota",
        "LimitRange",
        "PodSecurityPolicy",
        "PodDisruptionBudget",
        "ServiceAccount",
        "Secret",
        "ConfigMap",
        "StorageClass",
        "PersistentVolume",
        "PersistentVolumeClaim",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Service",
        "DaemonSet",
        "Pod",
        "ReplicationController",
        "ReplicaSet",
        "Deployment",
        "HorizontalPodAutoscaler",
        "StatefulSet",
        "Job",
        "CronJob",
        "IngressClass",
        "Ingress",
        "APIService",
    ];
    ORDER.iter().position(|k| *k == kind).unwrap_or(ORDER.len())
}

// ---------------------------------------------------------------------------------------------
// Masking and rendering.

/// `*** (sha256:0123abcd)`: a masked secret value. The digest (first 8 hex digits of the
/// SHA-256 of the value) makes a change visible without showing the value.
pub fn mask_value(v: &Value) -> Value {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Null => return Value::Null,
        other => other.to_string(),
    };
    let digest = Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    Value::String(format!("*** (sha256:{hex})"))
}

/// A copy of the object with Secret `data` and `stringData` values masked, and the
/// `kubectl.kubernetes.io/last-applied-configuration` annotation masked too (it repeats them).
/// Other objects are returned unchanged.
pub fn mask_secrets(obj: &Object) -> Object {
    if !obj.is_secret() {
        return obj.clone();
    }
    let mut out = obj.clone();
    for field in ["data", "stringData"] {
        match out.as_map_mut().get_mut(field) {
            Some(Value::Object(m)) => {
                for v in m.values_mut() {
                    *v = mask_value(v);
                }
            }
            // Not a mapping (Kubernetes would refuse it), but still the Secret's value.
            Some(v) if !v.is_null() => *v = mask_value(v),
            _ => {}
        }
    }
    if let Some(Value::Object(ann)) = out.metadata_mut().get_mut("annotations")
        && let Some(v) = ann.get_mut("kubectl.kubernetes.io/last-applied-configuration")
    {
        *v = mask_value(v);
    }
    out
}

/// Renders an object as YAML for people (owned view, secrets masked).
pub fn to_yaml(v: &Value) -> String {
    serde_saphyr::to_string(v)
        .unwrap_or_else(|_| serde_json::to_string_pretty(v).unwrap_or_default())
}

/// Renders one step as a unified diff of the owned views (secrets masked), with a header line:
/// `+ create ConfigMap default/x`, `~ update ...`, `- delete ...`. Unchanged steps render empty.
pub fn render_step(step: &Step) -> String {
    let (sign, verb) = match step.action {
        Action::Create => ('+', "create"),
        Action::Update => ('~', "update"),
        Action::Delete => ('-', "delete"),
        Action::Unchanged => return String::new(),
    };
    let view = |o: Option<&Object>| {
        o.map(|o| to_yaml(&owned_view(&mask_secrets(o))))
            .unwrap_or_default()
    };
    let before = view(step.live.as_ref());
    let after = view(step.target.as_ref());
    let mut out = format!("{sign} {verb} {}", step.key);
    if let Some(why) = &step.skipped {
        let _ = write!(out, " (skipped: {why})");
    }
    out.push('\n');
    let diff = similar::TextDiff::from_lines(&before, &after);
    let unified = diff
        .unified_diff()
        .context_radius(3)
        .header("live", "git")
        .to_string();
    out.push_str(&unified);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// Renders every changing step of a plan, then a one-line summary.
pub fn render_plan(plan: &Plan) -> String {
    let mut out = String::new();
    for step in &plan.steps {
        out.push_str(&render_step(step));
    }
    let s = plan.summary();
    let _ = writeln!(
        out,
        "{} to create, {} to update, {} to delete, {} unchanged{}",
        s.create,
        s.update,
        s.delete,
        s.unchanged,
        if s.skipped > 0 {
            format!(", {} delete(s) skipped", s.skipped)
        } else {
            String::new()
        }
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Object {
        Object::from_value(v).unwrap()
    }

    fn cm(data: Value) -> Object {
        obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": "default"}, "data": data}))
    }

    /// Cases of `merge_keeps` that random input rarely reaches: a top-level field Git applied
    /// and no longer declares, and a field declared null over an empty mapping it had applied.
    #[test]
    fn merge_keeps_agrees_with_merge_on_removals() {
        let cases = [
            // (declared, live, last-applied)
            (
                cm(json!({"a": "1"})),
                {
                    let mut l = cm(json!({"a": "1"}));
                    l.as_map_mut().insert("spec".into(), json!({"b": 1}));
                    l
                },
                {
                    let mut a = cm(json!({"a": "1"}));
                    a.as_map_mut().insert("spec".into(), json!({"c": 1}));
                    a
                },
            ),
            (
                cm(json!({"a": null})),
                cm(json!({"a": {}})),
                cm(json!({"a": {"b": "1"}})),
            ),
            (
                cm(json!({"a": {}})),
                cm(json!({"a": {}})),
                cm(json!({"a": {"b": "1"}})),
            ),
            (
                cm(json!({"a": "1"})),
                cm(json!({"a": "1"})),
                cm(json!({"a": "1"})),
            ),
        ];
        for (declared, live, last) in cases {
            let changes = merge(&declared, &live, Some(&last)) != live;
            assert_eq!(
                merge_keeps(&declared, &live, Some(&last)),
                !changes,
                "{declared:?} over {live:?} after {last:?}"
            );
        }
    }

    #[test]
    fn fields_only_in_live_are_not_drift() {
        let declared = obj(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "x", "namespace": "default", "labels": {"app": "x"}},
            "spec": {"replicas": 2}}));
        let live = obj(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "x", "namespace": "default", "labels": {"app": "x", "team": "a"},
                         "resourceVersion": "7", "generation": 3},
            "spec": {"replicas": 2, "strategy": {"type": "RollingUpdate"}},
            "status": {"readyReplicas": 2}}));
        let step = plan_one(&declared.key(), &declared, Some(&live), None);
        assert_eq!(step.action, Action::Unchanged, "{:?}", step.changes);
    }

    #[test]
    fn status_and_server_metadata_are_never_compared() {
        let declared = obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": "default", "creationTimestamp": null},
            "data": {"a": "1"}, "status": {"phase": "Declared"}}));
        let live = obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": "default", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "data": {"a": "1"}, "status": {"phase": "Other"}}));
        assert_eq!(
            plan_one(&declared.key(), &declared, Some(&live), None).action,
            Action::Unchanged
        );
        // And a merge never writes the declared status.
        let merged = merge(&declared, &live, None);
        assert_eq!(merged.get("status"), Some(&json!({"phase": "Other"})));
    }

    #[test]
    fn empty_values_compare_equal() {
        for (a, b) in [
            (json!(null), json!({})),
            (json!([]), json!(null)),
            (json!({"a": []}), json!({})),
            (json!({"a": {}}), json!({"a": null})),
        ] {
            assert!(equal(&a, &b), "{a} vs {b}");
        }
        assert!(!equal(&json!(""), &json!(null)));
        assert!(!equal(&json!([1]), &json!([])));
    }

    #[test]
    fn a_list_declared_empty_is_owned_and_a_map_declared_empty_is_not() {
        let svc = |spec: Value| {
            obj(json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "x", "namespace": "default"}, "spec": spec}))
        };
        let declared = svc(json!({"loadBalancerSourceRanges": [], "type": "LoadBalancer"}));
        // Filled by hand: drift, and the revert empties it.
        let live = svc(json!({"loadBalancerSourceRanges": ["0.0.0.0/0"], "type": "LoadBalancer"}));
        let step = plan_one(&declared.key(), &declared, Some(&live), None);
        assert_eq!(step.action, Action::Update);
        assert_eq!(step.changes[0].path, "spec.loadBalancerSourceRanges");
        let target = step.target.unwrap();
        assert_eq!(
            target.get("spec").unwrap()["loadBalancerSourceRanges"],
            json!([])
        );
        // Absent live: no false drift.
        let live = svc(json!({"type": "LoadBalancer"}));
        assert_eq!(
            plan_one(&declared.key(), &declared, Some(&live), None).action,
            Action::Unchanged
        );
        // `strategy: {}` declares no fields: the API server's defaults are not drift.
        let dep = |spec: Value| {
            obj(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "x", "namespace": "default"}, "spec": spec}))
        };
        let declared = dep(json!({"strategy": {}}));
        let live = dep(json!({"strategy": {"type": "RollingUpdate"}}));
        assert_eq!(
            plan_one(&declared.key(), &declared, Some(&live), None).action,
            Action::Unchanged
        );
    }

    #[test]
    fn who_changed_a_field_comes_from_managed_fields_latest_first() {
        let live = obj(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "managedFields": [
            {"manager": "driftless", "operation": "Apply", "time": "2026-12-02T10:00:00Z",
             "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                 "k:{\"name\":\"web\"}": {".": {}, "f:image": {}}}}}}}},
            {"manager": "kubectl-edit", "operation": "Update", "time": "2026-12-02T10:05:00Z",
             "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {
                 "k:{\"name\":\"web\"}": {"f:image": {}}}}}}}},
            {"manager": "kube-controller-manager", "operation": "Update", "time": "2026-12-02T10:01:00Z",
             "fieldsV1": {"f:spec": {"f:replicas": {}}}}
        ]}}));
        assert_eq!(
            who_changed(
                &live,
                "spec.template.spec.containers[name=web].image",
                &["driftless"]
            ),
            Some(("kubectl-edit".into(), "2026-12-02T10:05:00Z".into()))
        );
        assert_eq!(
            who_changed(&live, "spec.replicas", &["driftless"])
                .unwrap()
                .0,
            "kube-controller-manager"
        );
        assert_eq!(who_changed(&live, "spec.paused", &["driftless"]), None);
        assert_eq!(
            who_changed(
                &live,
                "spec.replicas",
                &["driftless", "kube-controller-manager"]
            ),
            None
        );
        assert_eq!(who_changed(&cm(json!({"k": "1"})), "data.k", &[]), None);
    }

    #[test]
    fn quantities_compare_by_value_where_kubernetes_types_them() {
        for (a, b) in [
            (json!(0.5), json!("500m")),
            (json!("1Gi"), json!("1024Mi")),
            (json!("1k"), json!(1000)),
            (json!("1e3"), json!("1k")),
            (json!("0.1"), json!("100m")),
            (json!("2"), json!(2)),
            (json!("0"), json!("0m")),
        ] {
            assert!(quantities_equal(&a, &b), "{a} = {b}");
        }
        for (a, b) in [
            (json!("1Gi"), json!("1G")),
            (json!("500m"), json!("0.05")),
            (json!("1x"), json!("1x")),
            (json!("abc"), json!("abc")),
            (json!("."), json!(".")),
        ] {
            assert!(!quantities_equal(&a, &b), "{a} != {b}");
        }
        let live = obj(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"template": {"spec": {"containers": [{"name": "web",
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}}}}));
        let declared = obj(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"template": {"spec": {"containers": [{"name": "web",
                "resources": {"requests": {"cpu": 0.5, "memory": "1024Mi"}}}]}}}}));
        assert!(compare(&live, &declared).is_empty());
        // Elsewhere a quantity-looking value is compared as written: a ConfigMap's "1k" is
        // not 1000.
        let live = cm(json!({"size": "1k"}));
        assert_eq!(compare(&live, &cm(json!({"size": "1000"}))).len(), 1);
    }

    #[test]
    fn numbers_compare_by_value_and_strings_exactly() {
        assert!(equal(&json!(1), &json!(1.0)));
        assert!(!equal(&json!(1), &json!(2)));
        assert!(!equal(&json!("1"), &json!(1)));
        assert!(!equal(&json!("a"), &json!("A")));
        let declared = cm(json!({"n": 1}));
        let live = cm(json!({"n": 1.0}));
        assert_eq!(
            plan_one(&declared.key(), &declared, Some(&live), None).action,
            Action::Unchanged
        );
    }

    #[test]
    fn a_changed_declared_field_is_drift_with_its_path() {
        let declared = cm(json!({"a": "1", "b": "2"}));
        let live = cm(json!({"a": "1", "b": "changed", "c": "other writer"}));
        let step = plan_one(&declared.key(), &declared, Some(&live), None);
        assert_eq!(step.action, Action::Update);
        assert_eq!(
            step.changes,
            vec![Change {
                path: "data.b".into(),
                live: Some(json!("changed")),
                desired: Some(json!("2"))
            }]
        );
        let target = step.target.unwrap();
        assert_eq!(
            target.get("data"),
            Some(&json!({"a": "1", "b": "2", "c": "other writer"}))
        );
    }

    #[test]
    fn three_way_removes_fields_git_dropped_but_keeps_other_writers_fields() {
        let last = cm(json!({"a": "1", "b": "2"}));
        let declared = cm(json!({"a": "1"}));
        let live = cm(json!({"a": "1", "b": "2", "c": "other writer"}));
        let step = plan_one(&declared.key(), &declared, Some(&live), Some(&last));
        assert_eq!(step.action, Action::Update);
        assert_eq!(step.changes[0].path, "data.b");
        assert_eq!(step.changes[0].desired, None);
        assert_eq!(
            step.target.unwrap().get("data"),
            Some(&json!({"a": "1", "c": "other writer"}))
        );
        // Without the last-applied copy, `b` is just another writer's field.
        assert_eq!(
            plan_one(&declared.key(), &declared, Some(&live), None).action,
            Action::Unchanged
        );
    }

    #[test]
    fn three_way_removes_dropped_top_level_fields_and_labels() {
        let mk = |labels: Value, extra: Option<(&str, Value)>| {
            let mut v = json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "x", "namespace": "default", "labels": labels}});
            if let Some((k, e)) = extra {
                v[k] = e;
            }
            obj(v)
        };
        let last = mk(
            json!({"app": "x", "tier": "web"}),
            Some(("spec", json!({"type": "ClusterIP"}))),
        );
        let declared = mk(json!({"app": "x"}), None);
        let live = mk(
            json!({"app": "x", "tier": "web", "owner": "ops"}),
            Some(("spec", json!({"type": "ClusterIP"}))),
        );
        let step = plan_one(&declared.key(), &declared, Some(&live), Some(&last));
        let target = step.target.expect("update");
        assert_eq!(target.get("spec"), None);
        assert_eq!(
            target.metadata()["labels"],
            json!({"app": "x", "owner": "ops"})
        );
    }

    #[test]
    fn lists_of_named_items_merge_by_name() {
        let declared = obj(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d"},
            "spec": {"containers": [{"name": "b", "image": "b:2"}, {"name": "a", "image": "a:1"}]}}),
        );
        let live = obj(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d"},
            "spec": {"containers": [{"name": "a", "image": "a:1", "imagePullPolicy": "Always"},
                                     {"name": "sidecar", "image": "proxy"},
                                     {"name": "b", "image": "b:1", "imagePullPolicy": "IfNotPresent"}]}}),
        );
        let step = plan_one(&declared.key(), &declared, Some(&live), None);
        assert_eq!(step.changes.len(), 1, "{:?}", step.changes);
        assert_eq!(step.changes[0].path, "spec.containers[name=b].image");
        let target = step.target.unwrap();
        // Live order kept, another writer's `sidecar` kept, fields inside items kept.
        assert_eq!(
            target.get("spec").unwrap()["containers"],
            json!([
            {"name": "a", "image": "a:1", "imagePullPolicy": "Always"},
            {"name": "sidecar", "image": "proxy"},
            {"name": "b", "image": "b:2", "imagePullPolicy": "IfNotPresent"}])
        );
        // An item applied before and no longer declared is removed.
        let last = obj(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d"},
            "spec": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}, {"name": "c", "image": "c"}]}}),
        );
        let live2 = obj(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d"},
            "spec": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:2"}, {"name": "c", "image": "c"}]}}),
        );
        let step = plan_one(&declared.key(), &declared, Some(&live2), Some(&last));
        assert_eq!(
            step.target.unwrap().get("spec").unwrap()["containers"],
            json!([
            {"name": "a", "image": "a:1"}, {"name": "b", "image": "b:2"}])
        );
    }

    #[test]
    fn defaults_inside_list_items_are_not_drift() {
        let declared = obj(
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "d"},
            "spec": {"ports": [{"port": 80}]}}),
        );
        let live = obj(
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "d"},
            "spec": {"ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}]}}),
        );
        assert_eq!(
            plan_one(&declared.key(), &declared, Some(&live), None).action,
            Action::Unchanged
        );
        let more = obj(
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "d"},
            "spec": {"ports": [{"port": 80}, {"port": 443}]}}),
        );
        assert_eq!(
            plan_one(&more.key(), &more, Some(&live), None).action,
            Action::Update
        );
    }

    #[test]
    fn a_secrets_data_that_is_not_a_mapping_is_masked_whole() {
        for data in [json!("cGxhaW4tc2VjcmV0"), json!(["cGxhaW4tc2VjcmV0"])] {
            let declared = obj(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "s", "namespace": "d"}, "data": data, "stringData": "plain-secret"}));
            let step = plan_one(&declared.key(), &declared, None, None);
            let shown = format!(
                "{} {}",
                render_step(&step),
                serde_json::to_string(mask_secrets(&declared).as_map()).unwrap()
            );
            assert!(
                !shown.contains("cGxhaW4tc2VjcmV0") && !shown.contains("plain-secret"),
                "{shown}"
            );
            assert!(shown.contains("*** (sha256:"), "{shown}");
        }
    }

    #[test]
    fn secret_empty_string_equals_null_and_values_are_masked() {
        let s = |data: Value| {
            obj(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "d"}, "data": data}))
        };
        let declared = s(json!({"a": "", "pw": "c2VjcmV0"}));
        let live = s(json!({"a": null, "pw": "c2VjcmV0"}));
        assert_eq!(
            plan_one(&declared.key(), &declared, Some(&live), None).action,
            Action::Unchanged
        );
        let changed = s(json!({"a": "", "pw": "bmV3"}));
        let step = plan_one(&changed.key(), &changed, Some(&live), None);
        let c = &step.changes[0];
        assert_eq!(c.path, "data.pw");
        let shown = format!("{:?} {}", step.changes, render_step(&step));
        assert!(
            !shown.contains("c2VjcmV0") && !shown.contains("bmV3"),
            "{shown}"
        );
        assert!(shown.contains("*** (sha256:"), "{shown}");
        assert_ne!(c.live, c.desired, "the digest shows the change");
    }

    #[test]
    fn plan_orders_namespaces_first_and_prunes_only_inventory() {
        let ns = obj(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "web"}}));
        let dep = obj(
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a", "namespace": "web"}}),
        );
        let old = cm(json!({"k": "v"}));
        let stranger = obj(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "stranger", "namespace": "default"}}),
        );
        let desired: BTreeMap<_, _> = [(dep.key(), dep.clone()), (ns.key(), ns.clone())].into();
        let live: BTreeMap<_, _> =
            [(old.key(), old.clone()), (stranger.key(), stranger.clone())].into();
        let inventory: BTreeMap<_, _> = [(old.key(), old.clone())].into();
        let p = plan(&desired, &live, &inventory, PlanOptions::default());
        let order: Vec<_> = p.steps.iter().map(|s| (s.action, s.key.kind())).collect();
        assert_eq!(
            order,
            vec![
                (Action::Create, "Namespace"),
                (Action::Create, "Deployment"),
                (Action::Delete, "ConfigMap")
            ]
        );
        assert_eq!(p.steps[2].key.name(), "x");
        assert_eq!(
            p.summary(),
            Summary {
                create: 2,
                update: 0,
                delete: 1,
                unchanged: 0,
                skipped: 0
            }
        );
    }

    #[test]
    fn an_empty_desired_set_does_not_prune_everything_unless_allowed() {
        let old = cm(json!({"k": "v"}));
        let live: BTreeMap<_, _> = [(old.key(), old.clone())].into();
        let p = plan(&BTreeMap::new(), &live, &live, PlanOptions::default());
        assert_eq!(p.steps.len(), 1);
        assert!(
            p.steps[0]
                .skipped
                .as_deref()
                .unwrap()
                .contains("allowEmpty")
        );
        assert_eq!(p.summary().delete, 0);
        let allowed = plan(
            &BTreeMap::new(),
            &live,
            &live,
            PlanOptions {
                prune: true,
                allow_empty: true,
                adopt: false,
                prune_non_empty: false,
            },
        );
        assert_eq!(allowed.summary().delete, 1);
        let no_prune = plan(
            &BTreeMap::new(),
            &live,
            &live,
            PlanOptions {
                prune: false,
                allow_empty: true,
                adopt: false,
                prune_non_empty: false,
            },
        );
        assert!(
            no_prune.steps[0]
                .skipped
                .as_deref()
                .unwrap()
                .contains("prune")
        );
    }

    #[test]
    fn create_strips_status_and_server_metadata() {
        let declared = obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": "d", "resourceVersion": "9", "uid": "u"},
            "data": {"a": "b"}, "status": {"x": 1}}));
        let c = for_create(&declared);
        assert_eq!(c.get("status"), None);
        assert_eq!(c.metadata().get("resourceVersion"), None);
        assert_eq!(c.metadata().get("uid"), None);
    }

    #[test]
    fn explicit_empty_maps_are_written_when_absent_but_never_overwrite() {
        let declared = obj(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d"},
            "spec": {"volumes": [{"name": "tmp", "emptyDir": {}}]}}),
        );
        let live = obj(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d"},
            "spec": {"volumes": [{"name": "tmp", "emptyDir": {"medium": "Memory"}}]}}),
        );
        let merged = merge(&declared, &live, None);
        assert_eq!(
            merged.get("spec").unwrap()["volumes"][0]["emptyDir"],
            json!({"medium": "Memory"})
        );
    }

    #[test]
    fn merge_then_compare_is_a_fixed_point() {
        // Applying the merge result and planning again finds nothing to do.
        let last = cm(json!({"a": "1", "b": "2"}));
        let declared = cm(json!({"a": "3", "n": 1}));
        let live = cm(json!({"a": "1", "b": "2", "c": "x", "n": 1.0}));
        let target = merge(&declared, &live, Some(&last));
        let again = plan_one(&declared.key(), &declared, Some(&target), Some(&declared));
        assert_eq!(again.action, Action::Unchanged, "{:?}", again.changes);
    }
}
