//! The watch cache: the objects of each kind the change feed watches, as its watch last saw
//! them, so that a pass compares with memory rather than reading every object from the API
//! server (as an informer does for a controller).
//!
//! A kind's cache is filled by a LIST (objects labelled `driftless.io/app`) when its watch
//! starts, and kept by that watch: each event is applied to the cache **before** it is sent on
//! the change feed, so whoever acts on an event reads a cache at least as new as it. Writes
//! through the store update it at once (a pass right after a write must not see the object as
//! it was). It answers only for objects it holds, of a kind whose watch is running: an object
//! it does not hold (not labelled, another tool's, gone) is read from the API server.
//! A watch error unsyncs the kind until its watch lists again.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::object::{Object, ObjectKey};

/// (group, kind).
type Kind = (String, String);

/// See the module documentation. Shared by every clone of a store.
#[derive(Default)]
pub(super) struct Cache {
    kinds: Mutex<HashMap<Kind, KindCache>>,
}

#[derive(Default)]
struct KindCache {
    synced: bool,
    /// (namespace, name) → the object.
    objects: HashMap<(String, String), Object>,
}

fn kind_of(key: &ObjectKey) -> Kind {
    (key.group().to_string(), key.kind().to_string())
}

fn name_of(key: &ObjectKey) -> (String, String) {
    (key.namespace().to_string(), key.name().to_string())
}

impl Cache {
    /// The cached object of `key`, when its kind's watch runs and holds it.
    pub(super) fn get(&self, key: &ObjectKey) -> Option<Object> {
        let kinds = self.kinds.lock().expect("cache lock");
        let kind = kinds.get(&kind_of(key)).filter(|k| k.synced)?;
        kind.objects.get(&name_of(key)).cloned()
    }

    /// The resourceVersion of the cached object of `key`, when its kind's watch runs and
    /// holds it (no copy of the object is made).
    pub(super) fn version(&self, key: &ObjectKey) -> Option<u64> {
        let kinds = self.kinds.lock().expect("cache lock");
        let kind = kinds.get(&kind_of(key)).filter(|k| k.synced)?;
        kind.objects
            .get(&name_of(key))
            .and_then(Object::resource_version)
    }

    /// Replaces a kind's objects with a listing's: the kind is synced from now on.
    pub(super) fn replace(&self, kind: Kind, objects: Vec<Object>) {
        let mut kinds = self.kinds.lock().expect("cache lock");
        let entry = kinds.entry(kind).or_default();
        entry.objects = objects
            .into_iter()
            .map(|o| (name_of(&o.key()), o))
            .collect();
        entry.synced = true;
    }

    /// Forgets whether a kind is current (its watch failed): answered by the API server until
    /// it lists again.
    pub(super) fn unsync(&self, kind: &Kind) {
        if let Some(k) = self.kinds.lock().expect("cache lock").get_mut(kind) {
            k.synced = false;
            k.objects.clear();
        }
    }

    /// True when the kind's watch has listed it and runs.
    pub(super) fn synced(&self, kind: &Kind) -> bool {
        self.kinds
            .lock()
            .expect("cache lock")
            .get(kind)
            .is_some_and(|k| k.synced)
    }

    /// Applies what a watch or a write saw of `key` at resourceVersion `rv`: the object, or
    /// `None` when it is gone (or no longer labelled). Older news than what the cache holds
    /// is ignored.
    pub(super) fn saw(&self, key: &ObjectKey, object: Option<&Object>, rv: u64) {
        let mut kinds = self.kinds.lock().expect("cache lock");
        let Some(kind) = kinds.get_mut(&kind_of(key)).filter(|k| k.synced) else {
            return;
        };
        let name = name_of(key);
        let held = kind
            .objects
            .get(&name)
            .and_then(Object::resource_version)
            .unwrap_or(0);
        if rv < held {
            return;
        }
        match object {
            Some(o) => {
                kind.objects.insert(name, o.clone());
            }
            None => {
                kind.objects.remove(&name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(name: &str, rv: u64, v: &str) -> Object {
        Object::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default", "resourceVersion": rv.to_string()},
            "data": {"v": v}}))
        .unwrap()
    }

    #[test]
    fn answers_only_for_a_synced_kind_and_never_goes_back_in_time() {
        let c = Cache::default();
        let kind = ("".to_string(), "ConfigMap".to_string());
        let a = cm("a", 5, "1");
        assert_eq!(c.get(&a.key()), None, "not listed yet");
        c.replace(kind.clone(), vec![a.clone()]);
        assert_eq!(c.get(&a.key()), Some(a.clone()));
        c.saw(&a.key(), Some(&cm("a", 4, "old")), 4);
        assert_eq!(c.get(&a.key()), Some(a.clone()), "older news ignored");
        c.saw(&a.key(), Some(&cm("a", 9, "new")), 9);
        assert_eq!(
            c.get(&a.key()).unwrap().get("data"),
            Some(&json!({"v": "new"}))
        );
        c.saw(&a.key(), None, 10);
        assert_eq!(c.get(&a.key()), None, "deleted");
        c.replace(kind.clone(), vec![a.clone()]);
        c.unsync(&kind);
        assert_eq!(c.get(&a.key()), None, "a failed watch answers nothing");
        c.saw(&a.key(), Some(&a), 5);
        assert!(
            !c.synced(&kind),
            "events do not sync a kind; a listing does"
        );
    }
}
