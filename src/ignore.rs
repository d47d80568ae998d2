//! Ignore rules (`apps[].sync.ignore`): fields another writer is meant to own (an HPA's
//! `spec.replicas`, a mutating webhook's injections), as Argo CD's `ignoreDifferences` and
//! Flux's `driftIgnoreRules`. An ignored field is taken out of the declaration before anything
//! is compared or applied, as Flux does: it is never drift, never reverted, and driftless never
//! becomes its manager. `paths` are taken out when the app is rendered ([`strip`]); `managers`
//! (Argo CD's `managedFieldsManagers`) need the live object, and are taken out by the sync on
//! stores that keep `managedFields` ([`strip_managed`]). Pure: no I/O.

use serde::Deserialize;
use serde_json::Value;
use serde_saphyr::Spanned;

use crate::object::{Object, ObjectKey};

/// One rule: `{paths: [/spec/replicas], target: {kind: Deployment, name: web}}`, or
/// `{managers: [kube-controller-manager]}`; at least one path or manager.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IgnoreRule {
    /// JSON pointers (RFC 6901) of the ignored fields, e.g. `/spec/replicas` or
    /// `/metadata/annotations/sidecar.istio.io~1status`.
    #[serde(default = "nothing")]
    pub paths: Spanned<Vec<Spanned<String>>>,
    /// Field managers (as `metadata.managedFields[].manager` names them, exactly, e.g.
    /// `kube-controller-manager` or `istio-sidecar-injector`): a declared field that one of
    /// them manages in the live object is ignored, as Argo CD's
    /// `ignoreDifferences[].managedFieldsManagers`. Only on stores that keep `managedFields`
    /// (Kubernetes).
    #[serde(default = "nothing")]
    pub managers: Spanned<Vec<Spanned<String>>>,
    /// Which objects the rule applies to; every object of the app when left out.
    #[serde(default)]
    pub target: Option<IgnoreTarget>,
}

/// `target:` of an ignore rule: every field given must match.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IgnoreTarget {
    /// API group (`apps`; empty for the core group).
    #[serde(default)]
    pub group: Option<String>,
    /// Kind, exact (`Deployment`).
    #[serde(default)]
    pub kind: Option<String>,
    /// Object name.
    #[serde(default)]
    pub name: Option<String>,
    /// Namespace.
    #[serde(default)]
    pub namespace: Option<String>,
    /// An equality-based label selector, as `kubectl -l`: `app=web,tier!=db,canary`
    /// (`key` alone: the label exists; `!key`: it does not).
    #[serde(default)]
    pub label_selector: Option<Spanned<String>>,
}

fn nothing() -> Spanned<Vec<Spanned<String>>> {
    crate::yaml::unspanned(Vec::new())
}

/// Why a rule is malformed, for the config's error at the field.
pub fn path_error(path: &str) -> Option<&'static str> {
    if !path.starts_with('/') || path.len() < 2 {
        return Some("a JSON pointer starting with `/`, e.g. `/spec/replicas`");
    }
    if path == "/metadata" || path.starts_with("/metadata/name") || path == "/kind" {
        return Some("an object's identity cannot be ignored");
    }
    None
}

/// Why a label selector does not parse, for the config's error at the field.
pub fn selector_error(selector: &str) -> Option<String> {
    for term in selector.split(',') {
        let term = term.trim();
        let key = term
            .split_once("!=")
            .or_else(|| term.split_once("=="))
            .or_else(|| term.split_once('='))
            .map_or(term.trim_start_matches('!'), |(k, _)| k)
            .trim();
        if key.is_empty() {
            return Some(format!(
                "`{term}` names no label: write `key=value`, `key!=value`, `key` or `!key`"
            ));
        }
    }
    None
}

impl IgnoreTarget {
    /// True when the object is one the rule applies to.
    pub fn matches(&self, key: &ObjectKey, object: &Object) -> bool {
        let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        eq(&self.group, key.group())
            && eq(&self.kind, key.kind())
            && eq(&self.name, key.name())
            && eq(&self.namespace, key.namespace())
            && self
                .label_selector
                .as_ref()
                .is_none_or(|s| selects(&s.value, object))
    }
}

/// An equality-based label selector against an object's labels.
fn selects(selector: &str, object: &Object) -> bool {
    let labels = object.metadata().get("labels").and_then(Value::as_object);
    let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    selector
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .all(|term| {
            if let Some((k, v)) = term.split_once("!=") {
                label(k.trim()) != Some(v.trim())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                label(k.trim()) == Some(v.trim())
            } else if let Some(k) = term.strip_prefix('!') {
                label(k.trim()).is_none()
            } else {
                label(term).is_some()
            }
        })
}

/// Takes the ignored fields out of one declaration, in place. Returns how many were removed.
pub fn strip(key: &ObjectKey, object: &mut Object, rules: &[IgnoreRule]) -> usize {
    let mut removed = 0;
    for rule in rules {
        if rule
            .target
            .as_ref()
            .is_some_and(|t| !t.matches(key, object))
        {
            continue;
        }
        for path in &rule.paths.value {
            if remove_pointer(object.as_map_mut(), &path.value) {
                removed += 1;
            }
        }
    }
    removed
}

/// Takes out of one declaration, in place, the fields that a manager named by a rule with
/// `managers` (whose target matches) manages in `live`, by its `metadata.managedFields`
/// (`fieldsV1`: `f:<field>` a field, `k:{"name":"web"}` a list item by its name). A list item
/// keyed otherwise (ports by number) is left whole, and an item's `name` stays (it is the key
/// the API server merges by). Returns how many fields were removed.
pub fn strip_managed(
    key: &ObjectKey,
    declared: &mut Object,
    live: &Object,
    rules: &[IgnoreRule],
) -> usize {
    let Some(entries) = live
        .metadata()
        .get("managedFields")
        .and_then(Value::as_array)
    else {
        return 0;
    };
    let mut removed = 0;
    for rule in rules.iter().filter(|r| !r.managers.value.is_empty()) {
        if rule
            .target
            .as_ref()
            .is_some_and(|t| !t.matches(key, declared))
        {
            continue;
        }
        let owned: Vec<&Value> = entries
            .iter()
            .filter(|e| {
                let manager = e.get("manager").and_then(Value::as_str).unwrap_or_default();
                rule.managers.value.iter().any(|m| m.value == manager)
            })
            .filter_map(|e| e.get("fieldsV1"))
            .collect();
        if !owned.is_empty() {
            removed += strip_owned(declared.as_map_mut(), &owned, None);
        }
    }
    removed
}

/// Removes from `declared` the fields any of `owned` (fieldsV1 nodes at the same level) holds;
/// `keep` is a field that stays (a list item's merge key).
fn strip_owned(
    declared: &mut serde_json::Map<String, Value>,
    owned: &[&Value],
    keep: Option<&str>,
) -> usize {
    let has_children = |n: &&Value| n.as_object().is_some_and(|m| m.keys().any(|k| k != "."));
    let mut removed = 0;
    let fields: Vec<String> = declared.keys().cloned().collect();
    for field in fields {
        if Some(field.as_str()) == keep {
            continue;
        }
        let f = format!("f:{field}");
        let nodes: Vec<&Value> = owned.iter().filter_map(|n| n.get(&f)).collect();
        if nodes.is_empty() {
            continue;
        }
        let deeper = nodes.iter().any(has_children);
        match declared.get_mut(&field) {
            Some(Value::Object(m)) if deeper => removed += strip_owned(m, &nodes, None),
            Some(Value::Array(items)) if deeper => {
                for item in items.iter_mut() {
                    let Value::Object(item) = item else { continue };
                    let Some(name) = item.get("name").and_then(Value::as_str) else {
                        continue;
                    };
                    let k = format!("k:{}", serde_json::json!({ "name": name }));
                    let item_nodes: Vec<&Value> = nodes.iter().filter_map(|n| n.get(&k)).collect();
                    if !item_nodes.is_empty() {
                        removed += strip_owned(item, &item_nodes, Some("name"));
                    }
                }
            }
            _ => {
                declared.remove(&field);
                removed += 1;
            }
        }
    }
    removed
}

/// Removes the value at a JSON pointer (RFC 6901: `~1` is `/`, `~0` is `~`; a list item by its
/// index). False when nothing is there.
fn remove_pointer(root: &mut serde_json::Map<String, Value>, pointer: &str) -> bool {
    let parts: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|p| p.replace("~1", "/").replace("~0", "~"))
        .collect();
    let Some((last, parents)) = parts.split_last() else {
        return false;
    };
    if parents.is_empty() {
        return root.remove(last).is_some();
    }
    let mut here: &mut Value = match root.get_mut(&parts[0]) {
        Some(v) => v,
        None => return false,
    };
    for p in &parents[1..] {
        here = match here {
            Value::Object(m) => match m.get_mut(p) {
                Some(v) => v,
                None => return false,
            },
            Value::Array(a) => match p.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                Some(v) => v,
                None => return false,
            },
            _ => return false,
        };
    }
    match here {
        Value::Object(m) => m.remove(last).is_some(),
        Value::Array(a) => match last.parse::<usize>() {
            Ok(i) if i < a.len() => {
                a.remove(i);
                true
            }
            _ => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(labels: Value) -> Object {
        Object::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "labels": labels,
                "annotations": {"a/b": "x"}},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [
                {"name": "web", "image": "nginx"}, {"name": "side", "image": "proxy"}]}}}}))
        .unwrap()
    }

    fn rule(paths: &[&str], target: Option<IgnoreTarget>) -> IgnoreRule {
        IgnoreRule {
            paths: crate::yaml::unspanned(
                paths
                    .iter()
                    .map(|p| crate::yaml::unspanned(p.to_string()))
                    .collect(),
            ),
            target,
            managers: crate::yaml::unspanned(Vec::new()),
        }
    }

    #[test]
    fn fields_a_named_manager_manages_leave_the_declaration_and_the_rest_stays() {
        let mut d = deployment(json!({"app": "web"}));
        let key = d.key();
        let mut live = d.clone();
        live.metadata_mut().insert(
            "managedFields".into(),
            json!([
                {"manager": "driftless", "operation": "Apply", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
                {"manager": "vpa-recommender", "operation": "Update", "fieldsV1": {"f:spec": {
                    "f:replicas": {},
                    "f:template": {"f:spec": {"f:containers": {
                        "k:{\"name\":\"side\"}": {".": {}, "f:name": {}, "f:image": {}}}}}}}},
            ]),
        );
        let mut rule = rule(&[], None);
        rule.managers =
            crate::yaml::unspanned(vec![crate::yaml::unspanned("vpa-recommender".to_string())]);
        assert_eq!(strip_managed(&key, &mut d, &live, &[rule.clone()]), 2);
        assert!(d.get("spec").unwrap().get("replicas").is_none());
        assert_eq!(
            d.get("spec")
                .unwrap()
                .pointer("/template/spec/containers")
                .unwrap(),
            &json!([{"name": "web", "image": "nginx"}, {"name": "side"}]),
            "the item's name stays: it is the key the API server merges by"
        );
        // Another manager, or no managedFields: nothing leaves.
        let mut d = deployment(json!({"app": "web"}));
        rule.managers = crate::yaml::unspanned(vec![crate::yaml::unspanned("hpa".to_string())]);
        assert_eq!(strip_managed(&key, &mut d, &live, &[rule.clone()]), 0);
        let unmanaged = d.clone();
        assert_eq!(strip_managed(&key, &mut d, &unmanaged, &[rule]), 0);
    }

    #[test]
    fn ignored_fields_leave_the_declaration_of_matching_objects_only() {
        let mut d = deployment(json!({"app": "web"}));
        let key = d.key();
        let only_web = IgnoreTarget {
            kind: Some("Deployment".into()),
            label_selector: Some(crate::yaml::unspanned("app=web,!canary".into())),
            ..IgnoreTarget::default()
        };
        let rules = [rule(
            &[
                "/spec/replicas",
                "/metadata/annotations/a~1b",
                "/spec/template/spec/containers/1",
                "/spec/nope",
            ],
            Some(only_web),
        )];
        assert_eq!(strip(&key, &mut d, &rules), 3);
        assert!(d.get("spec").unwrap().get("replicas").is_none());
        assert_eq!(d.metadata()["annotations"], json!({}));
        assert_eq!(
            d.get("spec")
                .unwrap()
                .pointer("/template/spec/containers")
                .unwrap(),
            &json!([{"name": "web", "image": "nginx"}])
        );
        let mut canary = deployment(json!({"app": "web", "canary": "yes"}));
        assert_eq!(
            strip(&key, &mut canary, &rules),
            0,
            "the selector excludes it"
        );
        let mut other = deployment(json!({"app": "db"}));
        assert_eq!(strip(&key, &mut other, &rules), 0);
        // No target: every object.
        let mut any = deployment(json!({}));
        assert_eq!(strip(&key, &mut any, &[rule(&["/spec/replicas"], None)]), 1);
    }

    #[test]
    fn malformed_paths_and_selectors_are_named() {
        assert!(path_error("spec.replicas").is_some());
        assert!(path_error("/metadata/name").is_some());
        assert!(path_error("/spec/replicas").is_none());
        assert!(selector_error("app=web, tier!=db,canary,!x").is_none());
        assert!(selector_error("=web").is_some());
    }
}
