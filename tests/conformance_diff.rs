//! The diff verdicts of argoproj/gitops-engine's test data (`tests/data/conformance/gitops-engine/diff`):
//! real API-server objects full of defaults must not read as drift.

use std::path::PathBuf;

use driftless::diff::{self, Action};
use driftless::object::Object;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/conformance/gitops-engine/diff")
}

fn load(name: &str) -> Object {
    let path = dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Object::from_value(serde_json::from_str(&text).unwrap()).unwrap()
}

/// Plans the declared object against the live one, the way an app targeting the live object's
/// namespace would (a declared object without a namespace gets the app's).
fn verdict(desired: &Object, live: &Object) -> diff::Step {
    let mut desired = desired.clone();
    if desired.namespace().is_empty() && !live.namespace().is_empty() {
        desired.set_namespace(live.namespace());
    }
    assert_eq!(desired.key(), live.key());
    diff::plan_one(&desired.key(), &desired, Some(live), None)
}

#[test]
fn every_pair_gets_the_verdict_expected_tsv_gives() {
    let expected = std::fs::read_to_string(dir().join("expected.tsv")).unwrap();
    let mut checked = 0;
    for line in expected.lines().skip(1) {
        let cols: Vec<&str> = line.split('\t').collect();
        let (pair, want) = (cols[0], cols[1]);
        if pair.contains(' ') {
            continue; // the labelled variant is checked below
        }
        let step = verdict(
            &load(&format!("{pair}-config.json")),
            &load(&format!("{pair}-live.json")),
        );
        let drift = step.action != Action::Unchanged;
        let want_drift = match want {
            "no drift" => false,
            "drift" => true,
            // Live rules are filled in by role aggregation; Git does not declare `rules`, so
            // they are another writer's field and not drift.
            w if w.starts_with("drift unless aggregated rules are ignored") => false,
            other => panic!("unknown verdict {other}"),
        };
        assert_eq!(drift, want_drift, "{pair}: {:?}", step.changes);
        checked += 1;
    }
    assert_eq!(checked, 9, "every plain pair of expected.tsv was checked");
}

#[test]
fn changed_labels_show_one_added_one_removed_and_one_changed() {
    let mut desired = load("elasticsearch-config.json");
    let live = load("elasticsearch-live.json");
    let labels = desired
        .metadata_mut()
        .get_mut("labels")
        .unwrap()
        .as_object_mut()
        .unwrap();
    labels.insert("foo".into(), "bar".into());
    labels.insert("chart".into(), "elasticsearch-1.7.1".into());
    labels.remove("release");
    // `release` was applied before (the live object's last-applied copy is the original config):
    // dropping it from Git removes it.
    let last = {
        let mut l = load("elasticsearch-config.json");
        l.set_namespace(live.namespace());
        l
    };
    desired.set_namespace(live.namespace());
    let step = diff::plan_one(&desired.key(), &desired, Some(&live), Some(&last));
    assert_eq!(step.action, Action::Update);
    let mut paths: Vec<(String, bool, bool)> = step
        .changes
        .iter()
        .map(|c| (c.path.clone(), c.live.is_some(), c.desired.is_some()))
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        vec![
            ("metadata.labels.chart".to_string(), true, true),
            ("metadata.labels.foo".to_string(), false, true),
            ("metadata.labels.release".to_string(), true, false),
        ]
    );
}
