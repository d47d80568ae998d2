//! Objects and writes for the store tests.

use driftless::object::{Object, ObjectKey};
use driftless::store::{Precondition, Write};
use serde_json::{Value, json};

/// A ConfigMap `default/<name>` with `data`.
pub fn cm(name: &str, data: Value) -> Object {
    Object::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"}, "data": data}))
    .unwrap()
}

/// A put of `o` under precondition `p`.
pub fn put(o: Object, p: Precondition) -> Write {
    Write::Put {
        object: o,
        precondition: p,
        json: None,
    }
}

/// The key of ConfigMap `default/<name>`.
pub fn key(name: &str) -> ObjectKey {
    ObjectKey::new("", "ConfigMap", "default", name)
}
