//! Properties checked over generated input (proptest).

use driftless::diff::{self, Action};
use driftless::manifest;
use driftless::object::Object;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// YAML-looking text built from tokens that tend to break parsers.
fn yamlish() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("apiVersion: v1\n".to_string()),
        Just("kind: ConfigMap\n".to_string()),
        Just("metadata:\n  name: a\n".to_string()),
        Just("---\n".to_string()),
        Just("- ".to_string()),
        Just("  ".to_string()),
        Just("\t".to_string()),
        Just(": ".to_string()),
        Just("&a ".to_string()),
        Just("*a ".to_string()),
        Just("<<: *a\n".to_string()),
        Just("{".to_string()),
        Just("}".to_string()),
        Just("[".to_string()),
        Just("]".to_string()),
        Just("\"".to_string()),
        Just("'".to_string()),
        Just("0755".to_string()),
        Just("!!binary ".to_string()),
        Just("!Ref ".to_string()),
        Just("\r\n".to_string()),
        Just("\u{feff}".to_string()),
        Just("# c\n".to_string()),
        Just("?".to_string()),
        "[a-z]{1,5}".prop_map(|s| s),
        "[0-9]{1,20}".prop_map(|s| s),
    ];
    prop::collection::vec(token, 0..40).prop_map(|v| v.concat())
}

/// A JSON value of nested maps and lists with scalar leaves.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-1000i64..1000).prop_map(Value::from),
        "[a-c]{0,3}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-d]", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
            // Lists of named items, the kind merged by name.
            prop::collection::btree_map("[a-c]", "[x-z]{1,2}", 1..3).prop_map(|m| {
                Value::Array(
                    m.into_iter()
                        .map(|(n, v)| json!({"name": n, "v": v}))
                        .collect(),
                )
            }),
        ]
    })
}

/// A JSON value from a tiny vocabulary (two keys, two names, empty values), so that three
/// values drawn from it often share fields, items and emptiness.
fn small_json_value() -> impl Strategy<Value = Value> + Clone {
    let leaf = prop_oneof![
        Just(Value::Null),
        Just(json!({})),
        Just(json!([])),
        Just(json!("a")),
        Just(json!(1)),
    ];
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[ab]", inner.clone(), 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
            prop::collection::btree_map("[ab]", inner, 1..3).prop_map(|m| {
                Value::Array(
                    m.into_iter()
                        .map(|(n, v)| json!({"name": n, "v": v}))
                        .collect(),
                )
            }),
        ]
    })
}

/// `v` with one part replaced by `with` (or removed, when `with` is null inside a mapping):
/// `path` picks the child at each level (modulo the number of children) until it runs out or
/// meets a leaf.
fn edited(v: Value, path: &[u8], with: Value) -> Value {
    let Some((p, rest)) = path.split_first() else {
        return with;
    };
    match v {
        Value::Object(mut m) if !m.is_empty() => {
            let k = m.keys().nth(*p as usize % m.len()).cloned().unwrap();
            if rest.is_empty() && with.is_null() {
                m.remove(&k);
            } else {
                let child = m[&k].take();
                m.insert(k, edited(child, rest, with));
            }
            Value::Object(m)
        }
        Value::Array(mut a) if !a.is_empty() => {
            let n = a.len();
            let child = a[*p as usize % n].take();
            a[*p as usize % n] = edited(child, rest, with);
            Value::Array(a)
        }
        _ => with,
    }
}

/// Three values that share most of their structure: one base and three edits of it.
fn related_json_values() -> impl Strategy<Value = (Value, Value, Value)> {
    let edit = || (prop::collection::vec(any::<u8>(), 0..4), small_json_value());
    (small_json_value(), edit(), edit(), edit()).prop_map(|(base, (pd, wd), (pl, wl), (pa, wa))| {
        (
            edited(base.clone(), &pd, wd),
            edited(base.clone(), &pl, wl),
            edited(base, &pa, wa),
        )
    })
}

fn configmap_with(spec: Value, labels: Value) -> Object {
    Object::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "x", "namespace": "d", "labels": labels}, "spec": spec}))
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn the_parser_never_panics_and_always_gives_a_position(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let r = manifest::parse_file("f.yaml", &bytes);
        for d in &r.diagnostics {
            prop_assert!(d.line >= 1 && d.column >= 1);
        }
    }

    #[test]
    fn yaml_like_text_gives_objects_or_positioned_diagnostics(text in yamlish()) {
        let r = manifest::parse_file("f.yaml", text.as_bytes());
        prop_assert!(!r.objects.is_empty() || !r.diagnostics.is_empty() || text.trim().is_empty() || r.skipped > 0);
        for d in &r.diagnostics {
            prop_assert!(d.line >= 1 && d.column >= 1, "{}", d);
            prop_assert!(!d.message.is_empty());
        }
    }

    /// Applying a merge and planning again finds nothing to do: the diff and the apply agree,
    /// so re-applying an unchanged declaration never writes.
    #[test]
    fn a_merge_is_a_fixed_point_of_the_plan(
        declared in json_value(), live in json_value(), last in json_value(),
        dl in prop::collection::btree_map("[a-c]", "[a-c]{1,2}", 0..3),
        ll in prop::collection::btree_map("[a-e]", "[a-c]{1,2}", 0..3),
    ) {
        let declared = configmap_with(declared, json!(dl));
        let live = configmap_with(live, json!(ll));
        let last = configmap_with(last, json!({}));
        let merged = diff::merge(&declared, &live, Some(&last));
        let again = diff::plan_one(&declared.key(), &declared, Some(&merged), Some(&declared));
        prop_assert_eq!(again.action, Action::Unchanged, "changes: {:?}", again.changes);
    }

    /// Keys order as the tuple (group, kind, namespace, name) of byte strings, as the store
    /// orders them: short parts (compared in place) and long ones (over 24 bytes) alike.
    #[test]
    fn object_keys_order_as_their_four_parts(
        a in prop::collection::vec("(|a|ab|é|[a-b]{20,30})", 4),
        b in prop::collection::vec("(|a|ab|é|[a-b]{20,30})", 4),
    ) {
        let key = |p: &[String]| driftless::object::ObjectKey::new(&p[0], &p[1], &p[2], &p[3]);
        let tuple = |p: &[String]| (p[0].clone(), p[1].clone(), p[2].clone(), p[3].clone());
        prop_assert_eq!(key(&a).cmp(&key(&b)), tuple(&a).cmp(&tuple(&b)));
        prop_assert_eq!(key(&a).partial_cmp(&key(&b)), Some(tuple(&a).cmp(&tuple(&b))));
    }

    /// Fields only the live object has, and that Git never applied, survive a merge.
    #[test]
    fn other_writers_top_level_fields_survive(declared in json_value(), extra in json_value()) {
        let declared = configmap_with(declared, json!({}));
        let mut live = configmap_with(json!({}), json!({}));
        live.as_map_mut().insert("otherWriter".into(), extra.clone());
        live.as_map_mut().insert("status".into(), json!({"ready": true}));
        let merged = diff::merge(&declared, &live, None);
        prop_assert_eq!(merged.get("otherWriter"), Some(&extra));
        prop_assert_eq!(merged.get("status"), Some(&json!({"ready": true})));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// The plan's shortcut for unchanged objects agrees with the merge it stands for: it says
    /// "unchanged" exactly when the merge gives the live object back. Live objects are random,
    /// the merge of one (a settled object, with or without the last-applied copy), or the
    /// declaration itself; the last-applied copy is absent, random or the declaration. The three
    /// are edits of one value from a tiny vocabulary, so that they share most fields.
    #[test]
    fn merge_keeps_says_exactly_whether_the_merge_changes_live(
        (declared, live, last) in prop_oneof![
            related_json_values(),
            (small_json_value(), small_json_value(), small_json_value()),
        ],
        dl in prop::collection::btree_map("[ab]", "a", 0..2),
        ll in prop::collection::btree_map("[ab]", "a", 0..2),
        live_from in 0..4u8, last_from in 0..3u8,
    ) {
        let declared = configmap_with(declared, json!(dl));
        let last = match last_from {
            0 => None,
            1 => Some(configmap_with(last, json!({}))),
            _ => Some(declared.clone()),
        };
        let live = match live_from {
            0 => configmap_with(live, json!(ll)),
            1 => diff::merge(&declared, &configmap_with(live, json!(ll)), last.as_ref()),
            // Settled before the last-applied copy was known: what it applied is still there.
            2 => diff::merge(&declared, &configmap_with(live, json!(ll)), None),
            _ => declared.clone(),
        };
        let keeps = diff::merge_keeps(&declared, &live, last.as_ref());
        prop_assert_eq!(keeps, diff::merge(&declared, &live, last.as_ref()) == live);
    }
}

/// What a step of the version-cache property does.
#[derive(Clone, Debug)]
enum CacheStep {
    /// Another process puts these objects (one transaction).
    Put(Vec<usize>),
    /// Another process deletes this object.
    Delete(usize),
    /// The agent asks the versions of these objects.
    Ask(Vec<usize>),
}

fn cache_step() -> impl Strategy<Value = CacheStep> {
    prop_oneof![
        3 => prop::collection::vec(0usize..12, 1..4).prop_map(CacheStep::Put),
        1 => (0usize..12).prop_map(CacheStep::Delete),
        2 => prop::collection::vec(0usize..12, 1..8).prop_map(CacheStep::Ask),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// The agent's cached view of the live objects' versions (kept by the SQLite change
    /// feed) answers every ask as a fresh read of the store would, and equals a fresh listing
    /// at the end, whatever another process wrote in between (puts, deletes, several at once,
    /// with the change log compacted so early that the feed may have to relist).
    #[test]
    fn the_cached_live_view_equals_a_fresh_listing_after_random_out_of_band_writes(
        steps in prop::collection::vec(cache_step(), 1..40),
    ) {
        use driftless::object::ObjectKey;
        use driftless::store::{Precondition, Selector, Store, Write, cached::VersionCache,
            sqlite::{Options, SqliteStore}};
        use std::sync::Arc;
        use std::time::Duration;
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("store.db");
            let agent: Arc<dyn Store> = Arc::new(SqliteStore::open(&path, Options::default()).unwrap());
            let cache = VersionCache::wrap(agent.clone()).await.unwrap();
            // Out of band: another connection, as another process would be.
            let other = SqliteStore::open(&path, Options { retain_revisions: 2, ..Options::default() }).unwrap();
            let key = |i: usize| ObjectKey::new("", "ConfigMap", "default", format!("c{i}"));
            let object = |i: usize, n: usize| {
                Object::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("c{i}"), "namespace": "default"},
                    "data": {"n": n.to_string()}})).unwrap()
            };
            for (n, step) in steps.into_iter().enumerate() {
                match step {
                    CacheStep::Put(mut ids) => {
                        ids.sort();
                        ids.dedup();
                        let writes = ids.iter().map(|i| Write::Put { object: object(*i, n), precondition: Precondition::Any, json: None }).collect();
                        other.commit(writes).await.unwrap();
                    }
                    CacheStep::Delete(i) => {
                        other.commit(vec![Write::Delete { key: key(i), precondition: Precondition::Any }]).await.unwrap();
                    }
                    CacheStep::Ask(ids) => {
                        let keys: Vec<ObjectKey> = ids.iter().map(|i| key(*i)).collect();
                        let refs: Vec<&ObjectKey> = keys.iter().collect();
                        let cached = cache.versions(&refs).await.unwrap();
                        let fresh = agent.versions(&refs).await.unwrap();
                        assert_eq!(cached, fresh, "asked {ids:?}");
                    }
                }
            }
            // Every key asked once more, twice: the second ask is the cache's alone.
            let keys: Vec<ObjectKey> = (0..12).map(key).collect();
            let refs: Vec<&ObjectKey> = keys.iter().collect();
            assert!(cache.view(Duration::from_secs(5)).await.unwrap().is_some(), "the feed catches up");
            cache.versions(&refs).await.unwrap();
            let served = cache.served();
            let cached = cache.versions(&refs).await.unwrap();
            assert_eq!(cache.served(), served + 1, "answered from the cache");
            let fresh = agent.versions(&refs).await.unwrap();
            assert_eq!(cached, fresh);
            // The whole view against a fresh listing.
            let view = cache.view(Duration::from_secs(5)).await.unwrap().expect("current");
            let listing = other.list(&Selector::default()).await.unwrap();
            for k in &keys {
                let live = listing.objects.get(k).and_then(|o| o.resource_version());
                assert_eq!(view.get(k).copied().flatten(), live, "{k}");
            }
        });
    }
}
