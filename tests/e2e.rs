//! End to end: the real `driftless` binary, real Git repositories made with `git`, the SQLite
//! store on disk, and a second process (`driftless store put`) writing while the agent runs.

mod common;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use common::{Env, configmap, env_for, stderr, stdout, sync_ok};
use serde_json::{Value, json};

#[test]
fn first_sync_applies_every_object_and_records_status() {
    let env = Env::new();
    let out = env.run(&["sync"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).starts_with("demo: Synced Healthy at "),
        "{}",
        stdout(&out)
    );
    let a = env.get("configmap", "a").expect("created");
    assert_eq!(a["data"], json!({"k": "1"}));
    assert_eq!(a["metadata"]["namespace"], "default");
    assert_eq!(a["metadata"]["generation"], 1);
    let st = env.status();
    assert_eq!(st["name"], "demo");
    assert_eq!(st["sync"], "Synced");
    assert_eq!(st["health"], "Healthy");
    assert_eq!(st["revision"], env.repo.head());
    assert_eq!(st["lastAttemptedRevision"], env.repo.head());
    assert_eq!(st["outOfSyncSince"], Value::Null);
    let resources = st["resources"].as_array().unwrap();
    assert_eq!(resources.len(), 2);
    assert_eq!(
        resources[0],
        json!({"group": "", "version": "v1", "kind": "ConfigMap", "namespace": "default", "name": "a", "sync": "Synced", "health": "Healthy"})
    );
    let ready = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(ready["status"], "True");
    assert_eq!(ready["reason"], "Synced");
    assert!(ready["lastTransitionTime"].as_str().unwrap().ends_with('Z'));
    for t in ["Reconciling", "SourceAvailable"] {
        assert!(
            st["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["type"] == t),
            "{t}"
        );
    }
    // The table form.
    let table = stdout(&env.run(&["status"]));
    assert!(table.starts_with("NAME"), "{table}");
    assert!(
        table.contains("demo") && table.contains("Synced"),
        "{table}"
    );
}

#[test]
fn every_object_of_a_large_app_gets_its_own_status() {
    // Enough objects for the status to be judged on several threads: each entry must still
    // be its own object's, in the order of the keys.
    let env = Env::new();
    let mut docs = String::new();
    for i in 0..700 {
        if i % 2 == 0 {
            docs.push_str(&configmap(&format!("c{i:04}"), &[("i", &i.to_string())]));
        } else {
            // No status yet: Progressing, its message naming it.
            docs.push_str(&format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d{i:04}\nspec:\n  selector: {{matchLabels: {{app: d{i:04}}}}}\n  template:\n    metadata: {{labels: {{app: d{i:04}}}}}\n    spec: {{containers: [{{name: c, image: nginx}}]}}\n"
            ));
        }
        docs.push_str("---\n");
    }
    env.repo.write("app/many.yaml", &docs);
    env.repo.commit("many");
    let out = env.run(&["sync"]);
    assert!(out.status.code().is_some(), "{}", stderr(&out));
    // The one-shot sync left its objects to the exit but closed the store (looked at before
    // any other command opens it): SQLite's log is copied back and gone.
    assert!(
        !env.dir.path().join("store.db-wal").exists(),
        "the store was closed before the exit"
    );
    let st = env.status();
    let resources = st["resources"].as_array().unwrap();
    assert_eq!(resources.len(), 702, "700 and the two first files");
    let mut names = Vec::new();
    for r in resources {
        let name = r["name"].as_str().unwrap();
        names.push((r["group"].as_str().unwrap(), name));
        assert_eq!(r["sync"], "Synced", "{r}");
        match r["kind"].as_str().unwrap() {
            "ConfigMap" => assert_eq!(r["health"], "Healthy", "{r}"),
            "Deployment" => {
                assert_eq!(r["health"], "Progressing", "{r}");
                assert_eq!(r["group"], "apps", "{r}");
                assert!(
                    r["healthMessage"]
                        .as_str()
                        .unwrap_or("")
                        .contains("rollout"),
                    "{r}"
                );
            }
            k => panic!("unexpected kind {k}"),
        }
    }
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "entries in key order");
    assert_eq!(
        names.iter().filter(|(g, _)| g.is_empty()).count(),
        352,
        "350 ConfigMaps and a, b"
    );
    // The inventory (over 16 KiB) is kept as its gzip, and read whole by the next sync.
    let db = rusqlite::Connection::open(env.dir.path().join("store.db")).unwrap();
    let stored: String = db
        .query_row(
            "SELECT typeof(body) FROM objects WHERE kind = 'Inventory'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(stored, "blob");
    let out = env.run(&["sync"]);
    assert!(stdout(&out).contains("702 unchanged"), "{}", stdout(&out));
}

/// A command that writes much leaves SQLite's write-ahead log copied back into the store file
/// when it ends, as SQLite's automatic checkpoint did inside the commit: the checkpoint runs on
/// a thread of the store, and every command waits for it before it exits (not only `sync`:
/// a `store put` that ended first left a log growing by its size at every put).
#[test]
fn a_large_store_put_leaves_the_log_checkpointed() {
    let env = Env::new();
    let data = "x".repeat(2000);
    let mut yaml = String::new();
    for i in 0..3000 {
        yaml.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i:05}, namespace: bulk}}\ndata: {{v: {data}}}\n"
        ));
    }
    env.put(&yaml);
    // About 6 MB: in the file itself, not only in its log.
    let size = std::fs::metadata(env.dir.path().join("store.db"))
        .unwrap()
        .len();
    assert!(size > 5_000_000, "store.db holds {size} bytes");
    let out = env.run(&["store", "list", "-n", "bulk"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out).lines().filter(|l| l.contains("c0")).count(),
        3000
    );
}

#[test]
fn a_no_op_resync_writes_nothing() {
    let env = Env::new();
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    let before = env.versions();
    let rev = env.store_revision();
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    assert_eq!(env.versions(), before, "resourceVersions unchanged");
    assert_eq!(
        env.store_revision(),
        rev,
        "not a single write, status record included"
    );
}

/// The status lists what the app declares: a no-op resync (every object skipped, known as
/// declared) keeps each one's entry; a pruned object's entry goes, a new one's comes.
#[test]
fn the_status_keeps_the_objects_a_resync_skips_and_drops_the_pruned_ones() {
    let env = Env::new();
    let names = |env: &Env| -> Vec<String> {
        env.status()["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| format!("{} {}", r["name"].as_str().unwrap(), r["sync"]))
            .collect()
    };
    sync_ok(&env);
    sync_ok(&env);
    assert_eq!(names(&env), ["a \"Synced\"", "b \"Synced\""]);
    env.repo.remove("app/a.yaml");
    env.repo.write("app/c.yaml", configmap("c", &[("k", "1")]));
    env.repo.commit("a pruned, c added");
    sync_ok(&env);
    assert!(env.get("configmap", "a").is_none(), "pruned");
    assert_eq!(names(&env), ["b \"Synced\"", "c \"Synced\""]);
    sync_ok(&env);
    assert_eq!(names(&env), ["b \"Synced\"", "c \"Synced\""]);
}

#[test]
fn an_out_of_band_change_is_reverted_by_the_change_feed() {
    let env = Env::new();
    let agent = env.agent();
    env.wait("first sync", Duration::from_secs(30), || {
        env.get("configmap", "a").is_some()
    });
    // The interval is one hour: only the change feed can bring the revert.
    env.put(&configmap("a", &[("k", "changed by hand")]));
    let took = env.wait("revert", Duration::from_secs(10), || {
        env.get("configmap", "a")
            .is_some_and(|a| a["data"]["k"] == "1")
    });
    eprintln!("reverted in {took:?}");
    let (code, log) = agent.stop();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("Drift reverted"), "{log}");
    assert!(log.contains("Stopped cleanly"), "{log}");
}

#[test]
fn an_out_of_band_delete_is_recreated() {
    let env = Env::new();
    let _agent = env.agent();
    env.wait("first sync", Duration::from_secs(30), || {
        env.get("configmap", "b").is_some()
    });
    let out = env.run(&["store", "delete", "configmap", "b"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    env.wait("recreate", Duration::from_secs(10), || {
        env.get("configmap", "b").is_some()
    });
    assert_eq!(
        env.get("configmap", "b").unwrap()["data"],
        json!({"k": "1"})
    );
}

#[test]
fn undeclared_fields_are_kept_and_are_not_drift() {
    let env = Env::new();
    let agent = env.agent();
    env.wait("first sync", Duration::from_secs(30), || {
        env.get("configmap", "a").is_some()
    });
    // Another writer adds a label and a data key Git does not declare, and a status.
    env.put("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: {team: ops}\ndata:\n  k: \"1\"\n  extra: kept\nstatus:\n  seen: \"yes\"\n");
    let rv = env.get("configmap", "a").unwrap()["metadata"]["resourceVersion"].clone();
    // Make a real drift on another object, and wait for it to be reverted: the agent has by
    // then also seen the first write.
    env.put(&configmap("b", &[("k", "drift")]));
    env.wait("revert of b", Duration::from_secs(10), || {
        env.get("configmap", "b")
            .is_some_and(|b| b["data"]["k"] == "1")
    });
    let a = env.get("configmap", "a").unwrap();
    assert_eq!(a["metadata"]["resourceVersion"], rv, "not written again");
    assert_eq!(a["data"]["extra"], "kept");
    assert_eq!(a["metadata"]["labels"]["team"], "ops");
    assert_eq!(a["status"]["seen"], "yes");
    assert_eq!(env.status()["sync"], "Synced");
    drop(agent);
}

#[test]
fn new_commits_are_applied_and_removed_files_pruned() {
    let env = Env::with_options("1s", "");
    let _agent = env.agent();
    env.wait("first sync", Duration::from_secs(30), || {
        env.get("configmap", "a").is_some()
    });
    env.repo.write("app/a.yaml", configmap("a", &[("k", "2")]));
    env.repo.write("app/c.yaml", configmap("c", &[]));
    env.repo.remove("app/b.yaml");
    let head = env.repo.commit("second");
    env.wait("new commit applied", Duration::from_secs(30), || {
        env.status()["revision"] == head
    });
    assert_eq!(env.get("configmap", "a").unwrap()["data"]["k"], "2");
    assert!(env.get("configmap", "c").is_some());
    assert!(env.get("configmap", "b").is_none(), "pruned");
    assert_eq!(
        env.get("configmap", "a").unwrap()["metadata"]["generation"],
        2
    );
}

#[test]
fn objects_never_declared_by_git_are_not_pruned() {
    let env = Env::new();
    env.put(&configmap("stranger", &[("k", "v")]));
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    env.repo.remove("app/b.yaml");
    env.repo.commit("drop b");
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    assert!(env.get("configmap", "b").is_none(), "b was ours: pruned");
    assert!(
        env.get("configmap", "stranger").is_some(),
        "never ours: kept"
    );
}

#[test]
fn a_bad_commit_applies_nothing_and_the_previous_revision_stays_enforced() {
    let env = Env::new();
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    let good = env.repo.head();
    // One valid change and one broken file in the same commit.
    env.repo.write("app/a.yaml", configmap("a", &[("k", "2")]));
    env.repo.write("app/bad.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\n  labels:\n    track: a\n    track: b\n");
    let bad = env.repo.commit("broken");
    let out = env.run(&["sync"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("app/bad.yaml:7:5: error: duplicate key `track`"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        env.get("configmap", "a").unwrap()["data"]["k"],
        "1",
        "nothing of the bad commit applied"
    );
    assert!(env.get("configmap", "bad").is_none());
    let st = env.status();
    assert_eq!(st["revision"], good);
    assert_eq!(st["lastAttemptedRevision"], bad);
    assert_eq!(st["sync"], "Unknown");
    assert_eq!(
        st["diagnostics"][0],
        json!({"severity": "error", "path": "app/bad.yaml", "line": 7, "column": 5, "message": "duplicate key `track`"})
    );
    let ready = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready["reason"], "InvalidManifest");
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid manifest app/bad.yaml:7:5: duplicate key `track`"),
        "{ready}"
    );
    // The table cuts a long message; `-o wide` shows it whole.
    let whole = format!("InvalidManifest: {}", ready["message"].as_str().unwrap());
    assert!(whole.chars().count() > 80, "{whole}");
    let table = stdout(&env.run(&["status"]));
    let row = table.lines().find(|l| l.starts_with("demo")).unwrap();
    assert!(row.ends_with('…') && !row.contains(&whole), "{table}");
    let wide = stdout(&env.run(&["status", "-o", "wide"]));
    assert!(wide.contains(&whole), "{wide}");
    // The good revision is still enforced: drift is reverted to it.
    env.put(&configmap("b", &[("k", "drift")]));
    env.run(&["sync"]);
    assert_eq!(env.get("configmap", "b").unwrap()["data"]["k"], "1");
    // A fixed commit recovers.
    env.repo.remove("app/bad.yaml");
    let fixed = env.repo.commit("fixed");
    let out = env.run(&["sync"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let st = env.status();
    assert_eq!(st["revision"], fixed);
    assert_eq!(st["sync"], "Synced");
    assert_eq!(st["diagnostics"], json!([]));
    assert_eq!(env.get("configmap", "a").unwrap()["data"]["k"], "2");
}

#[test]
fn a_tree_bomb_commit_is_refused_and_the_previous_revision_stays_enforced() {
    let env = Env::new();
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    let good = env.repo.head();
    // A few KB in Git, 16 million files when walked: read to the bound, then refused.
    let bomb = env.repo.commit_tree_bomb(24);
    let out = env.run(&["sync"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stderr(&out).contains("app/"), "{}", stderr(&out));
    let st = env.status();
    assert_eq!(st["revision"], good);
    assert_eq!(st["lastAttemptedRevision"], bomb);
    let message = st["diagnostics"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("more than 250000 files and folders (source.limits.maxEntries"),
        "{st}"
    );
    assert_eq!(st["diagnostics"].as_array().unwrap().len(), 1, "{st}");
    assert_eq!(env.get("configmap", "a").unwrap()["data"]["k"], "1");
    assert_eq!(env.get("configmap", "b").unwrap()["data"]["k"], "1");
    // The good revision is still enforced.
    env.put(&configmap("b", &[("k", "drift")]));
    assert_eq!(env.run(&["sync"]).status.code(), Some(1));
    assert_eq!(env.get("configmap", "b").unwrap()["data"]["k"], "1");
}

#[test]
fn a_submodule_in_place_of_a_folder_applies_nothing_and_prunes_nothing() {
    let env = Env::new();
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    let good = env.repo.head();
    // The manifests move into a submodule (a gitlink in the tree), which is not read.
    env.repo.git(&["rm", "-q", "app/a.yaml", "app/b.yaml"]);
    env.repo.git(&[
        "update-index",
        "--add",
        "--cacheinfo",
        &format!("160000,{good},app/manifests"),
    ]);
    env.repo.git(&["commit", "-q", "-m", "submodule"]);
    let out = env.run(&["sync"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("app/manifests:1:1: error: `app/manifests` is a Git submodule"),
        "{}",
        stderr(&out)
    );
    assert!(env.get("configmap", "a").is_some(), "nothing pruned");
    assert!(env.get("configmap", "b").is_some(), "nothing pruned");
    assert_eq!(env.status()["revision"], good);
}

#[test]
fn the_previous_revision_survives_a_restart_with_a_bad_head() {
    let env = Env::new();
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    env.repo.write(
        "app/bad.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: 0755}\n",
    );
    env.repo.commit("bad");
    // A new process, the bad commit at HEAD: the inventory still says what is in force.
    env.put(&configmap("a", &[("k", "drift")]));
    assert_eq!(env.run(&["sync"]).status.code(), Some(1));
    assert_eq!(env.get("configmap", "a").unwrap()["data"]["k"], "1");
}

#[test]
fn an_empty_desired_set_prunes_nothing_unless_allowed() {
    let env = Env::new();
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    let good = env.repo.head();
    env.repo.remove("app/a.yaml");
    env.repo.remove("app/b.yaml");
    let empty = env.repo.commit("everything gone");
    let ready_reason = |env: &Env| {
        env.status()["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap()["reason"]
            .clone()
    };
    // Blocked, and it stays blocked: a second pass (and a new process) does not forget it.
    for _ in 0..2 {
        assert_eq!(env.run(&["sync"]).status.code(), Some(1));
        assert!(env.get("configmap", "a").is_some() && env.get("configmap", "b").is_some());
        let st = env.status();
        assert_eq!(ready_reason(&env), "PruneBlocked");
        assert_eq!(st["sync"], "OutOfSync");
        assert_eq!(st["revision"], good, "the previous revision stays in force");
        assert_eq!(st["lastAttemptedRevision"], empty);
    }
    // ... and enforced: drift reverted, a deleted object recreated.
    env.put(&configmap("a", &[("k", "drift")]));
    assert_eq!(
        env.run(&["store", "delete", "configmap", "b"])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(env.run(&["sync"]).status.code(), Some(1));
    assert_eq!(env.get("configmap", "a").unwrap()["data"]["k"], "1");
    assert!(env.get("configmap", "b").is_some());
    // Allowed explicitly, the empty revision prunes everything.
    let allow = std::fs::read_to_string(env.config()).unwrap() + "      allowEmpty: true\n";
    std::fs::write(env.config(), allow).unwrap();
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    assert!(env.get("configmap", "a").is_none() && env.get("configmap", "b").is_none());
    assert_eq!(env.status()["revision"], empty);
}

#[test]
fn changing_the_path_or_namespace_in_the_config_applies_without_a_new_commit() {
    let env = Env::new();
    env.repo.write("other/c.yaml", configmap("c", &[]));
    env.repo.commit("another folder");
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    let config = std::fs::read_to_string(env.config()).unwrap();
    std::fs::write(env.config(), config.replace("path: app", "path: other")).unwrap();
    let out = env.run(&["sync"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(env.get("configmap", "c").is_some());
    assert!(
        env.get("configmap", "a").is_none(),
        "the old path's objects are pruned"
    );
    let config = std::fs::read_to_string(env.config()).unwrap();
    std::fs::write(env.config(), config + "    target: {namespace: prod}\n").unwrap();
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    assert!(
        env.run(&["store", "get", "configmap", "c", "-n", "prod"])
            .status
            .success()
    );
    assert!(
        !env.run(&["store", "get", "configmap", "c", "-n", "default"])
            .status
            .success()
    );
}

#[test]
fn detect_only_reports_drift_with_its_age_and_does_not_revert() {
    let env = Env::with_sync("      selfHeal: false\n");
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    let agent = env.agent();
    env.wait("the agent's first pass", Duration::from_secs(30), || {
        env.status()["sync"] == "Synced"
    });
    env.put(&configmap("a", &[("k", "by hand")]));
    env.wait("drift reported", Duration::from_secs(30), || {
        env.status()["sync"] == "OutOfSync"
    });
    assert_eq!(
        env.get("configmap", "a").unwrap()["data"]["k"],
        "by hand",
        "not reverted"
    );
    let st = env.status();
    assert!(st["outOfSyncSince"].as_str().is_some());
    let a = st["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "a")
        .unwrap()
        .clone();
    assert_eq!(a["sync"], "OutOfSync");
    assert!(a["message"].as_str().unwrap().contains("data.k"), "{a}");
    // The transition is logged, once.
    let log = env.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains("Condition changed")
                && l.contains("condition=Ready")
                && l.contains("reason=OutOfSync")
        })
        .collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(lines[0].contains("WARN"), "{}", lines[0]);
    // So is the drift itself, naming the object and its fields, once.
    let drift: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("Drift detected; not reverted"))
        .collect();
    assert_eq!(drift.len(), 1, "{log}");
    assert!(
        drift[0].contains("ConfigMap default/a")
            && drift[0].contains("data.k")
            && drift[0].contains("selfHeal is off"),
        "{}",
        drift[0]
    );
    // `sync --dry-run` plans the revert and writes nothing.
    let out = env.run(&["sync", "--dry-run"]);
    assert!(
        stdout(&out).contains("1 to update, 0 to delete"),
        "{}",
        stdout(&out)
    );
    assert_eq!(env.get("configmap", "a").unwrap()["data"]["k"], "by hand");
    // A manual sync applies, as in Argo CD: selfHeal governs only automatic reverts.
    let out = env.run(&["sync"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(env.get("configmap", "a").unwrap()["data"]["k"], "1");
    // A new commit is still applied automatically.
    env.repo.write("app/b.yaml", configmap("b", &[("k", "2")]));
    env.repo.commit("b changes");
    env.run(&["sync"]);
    assert_eq!(env.get("configmap", "b").unwrap()["data"]["k"], "2");
    agent.stop();
}

#[test]
fn diff_exits_1_when_only_a_delete_held_by_prune_false_differs() {
    let env = Env::new();
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    let config = std::fs::read_to_string(env.config())
        .unwrap()
        .replace("prune: true", "prune: false");
    std::fs::write(env.config(), config).unwrap();
    env.repo.remove("app/b.yaml");
    env.repo.commit("b goes");
    // The sync applies the revision and says what it kept (exit 1: not all synced).
    let out = env.run(&["sync"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(env.get("configmap", "b").is_some(), "prune: false keeps it");
    // Again, in a new process (which restores the desired set from the inventory): the kept
    // object is still not declared, so still OutOfSync, never green.
    let again = env.run(&["sync"]);
    assert_eq!(again.status.code(), Some(1), "{}", stdout(&again));
    assert!(stdout(&again).contains("OutOfSync"), "{}", stdout(&again));
    // The status says the app differs from Git; diff agrees.
    assert_eq!(env.status()["sync"], "OutOfSync");
    let out = env.run(&["diff"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).contains("prune"), "{}", stdout(&out));
}

#[test]
fn diff_exits_0_1_2_and_masks_secrets() {
    let env = Env::new();
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    let same = env.run(&["diff"]);
    assert_eq!(same.status.code(), Some(0), "{}", stdout(&same));
    assert!(
        stdout(&same).contains("0 to create, 0 to update, 0 to delete, 2 unchanged"),
        "{}",
        stdout(&same)
    );
    env.repo.write("app/a.yaml", configmap("a", &[("k", "2")]));
    env.repo.write(
        "app/s.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata:\n  password: aHVudGVyMg==\n",
    );
    env.repo.commit("change");
    let changed = env.run(&["diff"]);
    assert_eq!(changed.status.code(), Some(1), "{}", stderr(&changed));
    let text = stdout(&changed);
    assert!(text.contains("~ update ConfigMap default/a"), "{text}");
    assert!(
        text.contains("-  k: '1'") || text.contains("-  k: \"1\""),
        "{text}"
    );
    assert!(text.contains("+ create Secret default/s"), "{text}");
    assert!(!text.contains("aHVudGVyMg=="), "secret value shown: {text}");
    assert!(text.contains("*** (sha256:"), "{text}");
    assert!(
        text.contains("1 to create, 1 to update, 0 to delete, 1 unchanged"),
        "{text}"
    );
    // Nothing was written by diff.
    assert_eq!(env.get("configmap", "a").unwrap()["data"]["k"], "1");
    // A past revision by id.
    let first = env.repo.git(&["rev-list", "--max-parents=0", "HEAD"]);
    assert_eq!(
        env.run(&["diff", "--revision", &first]).status.code(),
        Some(0)
    );
    env.repo.write(
        "app/bad.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: 'Bad'}\n",
    );
    env.repo.commit("bad");
    let bad = env.run(&["diff"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("app/bad.yaml:3:18: error: invalid metadata.name `Bad`"),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn validate_prints_path_line_column_and_exits_1_on_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ok.yaml"), configmap("ok", &[])).unwrap();
    std::fs::write(dir.path().join("values.yaml"), "replicas: 2\n").unwrap();
    let good = Command::new(env!("CARGO_BIN_EXE_driftless"))
        .arg("validate")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(good.status.code(), Some(0), "{}", stdout(&good));
    let shown = dir.path().join("values.yaml").display().to_string();
    assert_eq!(
        stdout(&good),
        format!(
            "{shown}:1:1: warning: skipped: no `apiVersion` and `kind`, so not an object (Helm values, kustomization.yaml or CI files look like this)\n"
        )
    );
    std::fs::write(
        dir.path().join("bad.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  labels:\n    version: 1.20\n",
    )
    .unwrap();
    let bad = Command::new(env!("CARGO_BIN_EXE_driftless"))
        .arg("validate")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    let bad_path = dir.path().join("bad.yaml").display().to_string();
    assert!(
        stdout(&bad).contains(&format!("{bad_path}:6:14: error: value of label `version` must be a string, not a number: write `version: \"1.20\"`")),
        "{}",
        stdout(&bad)
    );
    assert!(
        stderr(&bad).contains("3 file(s), 1 object(s), 1 skipped, 1 error(s), 1 warning(s)"),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn store_commands_get_put_list_delete_with_their_exit_statuses() {
    let env = Env::new();
    // Reading commands on a store that does not exist yet leave no file behind (what `status`
    // shows then: `status_needs_a_config_and_lists_apps_not_synced_yet`).
    assert_eq!(env.run(&["status", "-o", "json"]).status.code(), Some(0));
    assert_eq!(env.run(&["store", "list"]).status.code(), Some(0));
    assert!(
        !env.dir.path().join("store.db").exists(),
        "reading creates no store"
    );
    assert_eq!(
        env.run(&["store", "get", "configmap", "nope"])
            .status
            .code(),
        Some(1)
    );
    assert_eq!(
        env.run(&["store", "delete", "configmap", "nope"])
            .status
            .code(),
        Some(1)
    );
    env.put("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: prod}\nspec: {replicas: 1}\n");
    let list = stdout(&env.run(&["store", "list", "Deployment.apps", "-n", "prod"]));
    assert!(list.contains("prod") && list.contains("web"), "{list}");
    let got = env.run(&[
        "store",
        "get",
        "deployments.apps",
        "web",
        "-n",
        "prod",
        "-o",
        "yaml",
    ]);
    assert_eq!(got.status.code(), Some(0));
    assert!(stdout(&got).contains("replicas: 1"), "{}", stdout(&got));
    // Compare-and-swap from a file that carries a stale resourceVersion.
    env.put("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: prod}\nspec: {replicas: 2}\n");
    let f = env.dir.path().join("stale.yaml");
    std::fs::write(&f, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: prod, resourceVersion: \"1\"}\nspec: {replicas: 3}\n").unwrap();
    let stale = env.run(&["store", "put", "-f", f.to_str().unwrap()]);
    assert_eq!(stale.status.code(), Some(2));
    assert!(
        stderr(&stale).contains("conflict on Deployment.apps prod/web: expected resourceVersion 1"),
        "{}",
        stderr(&stale)
    );
    assert_eq!(
        env.run(&["store", "delete", "deployment", "web", "-n", "prod"])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(
        env.run(&["store", "get", "deployment", "web", "-n", "prod"])
            .status
            .code(),
        Some(1)
    );
    // A broken file writes nothing and says where.
    let broken = env.dir.path().join("broken.yaml");
    std::fs::write(
        &broken,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n---\nkind: [\n",
    )
    .unwrap();
    let out = env.run(&["store", "put", "-f", broken.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(env.get("configmap", "ok").is_none());
}

/// glibc's heaps of arenas other than the main one in the process `pid`: each reserved as one
/// mapping aligned to and as large as `HEAP_MAX_SIZE` (64 MiB on 64-bit, glibc's `arena.c`),
/// its used part readable and writable, the rest not (`---p`), split into two mappings.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn malloc_heaps(pid: u32) -> usize {
    const HEAP: u64 = 64 << 20;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let spans: Vec<(u64, u64, bool)> = maps
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (range, perms) = (f.next()?, f.next()?);
            let named = f.nth(3).is_some(); // offset, device, inode, then a path or nothing
            let (a, b) = range.split_once('-')?;
            let (a, b) = (
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            );
            (!named).then_some((a, b, perms.starts_with("rw")))
        })
        .collect();
    spans
        .iter()
        .enumerate()
        .filter(|(i, (a, b, rw))| {
            *rw && a % HEAP == 0
                && (*b == a + HEAP
                    || spans
                        .get(i + 1)
                        .is_some_and(|(c, d, rw2)| c == b && !rw2 && *d == a + HEAP))
        })
        .count()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn an_agent_of_one_app_allocates_from_one_malloc_arena() {
    let env = Env::new();
    let count = |vars: &[(&str, &str)]| {
        let agent = env.agent_with_env(vars);
        // Started (its signals handled) as well as synced: the second agent finds the object
        // of the first there, and a SIGTERM before it listens ended it unannounced.
        env.wait("first sync", Duration::from_secs(30), || {
            env.get("configmap", "a").is_some() && env.log().contains("Agent started")
        });
        let heaps = malloc_heaps(agent.pid());
        let (code, log) = agent.stop();
        assert_eq!(code, Some(0), "{log}");
        heaps
    };
    // The count sees the arenas a second thread makes when two are allowed...
    assert!(count(&[("MALLOC_ARENA_MAX", "2")]) >= 1);
    // ...and the agent of one app makes none: main sets the limit before any thread starts.
    assert_eq!(count(&[]), 0);
}

#[test]
fn json_logs_are_one_object_per_line() {
    let env = Env::new();
    let agent = env.agent_with(&["--log-format", "json"]);
    env.wait("first sync", Duration::from_secs(30), || {
        env.get("configmap", "a").is_some()
    });
    let (code, log) = agent.stop_with("-INT");
    assert_eq!(code, Some(0), "SIGINT stops cleanly too: {log}");
    let lines: Vec<&str> = log.lines().collect();
    assert!(lines.len() >= 3, "{log}");
    let mut transitions = 0;
    for l in lines {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        assert!(v["fields"]["message"].is_string(), "{l}");
        // The event's text stays `message`; the condition's own message is `detail` (a second
        // `message` key would hide the event's text from every JSON reader).
        if v["fields"]["message"] == "Condition changed" {
            transitions += 1;
            assert!(v["fields"]["detail"].is_string(), "{l}");
            assert_eq!(l.matches("\"message\"").count(), 1, "{l}");
        }
    }
    assert!(transitions > 0, "no condition transition logged: {log}");
}

#[test]
fn anonymous_https_repositories_are_fetched_and_followed() {
    let server = common::HttpsGitServer::start();
    let env = Env::new();
    let url = server.publish(&env.repo, "manifests");
    let env = Env {
        repo: env.repo,
        dir: env_for(&url, "app").dir,
    };
    let sync = |trust: bool| {
        let mut c = env.cmd();
        if trust {
            c.env("SSL_CERT_FILE", &server.cert);
        }
        c.arg("sync").output().unwrap()
    };
    // An untrusted certificate is a source error: nothing is applied, and it says why.
    let out = sync(false);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(env.get("configmap", "a").is_none());
    let source = env.status()["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "SourceAvailable")
        .unwrap()
        .clone();
    assert_eq!(source["status"], "False");
    assert!(
        source["message"].as_str().unwrap().contains("certificate"),
        "{source}"
    );
    // Trusted, it syncs.
    let out = sync(true);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(env.get("configmap", "a").unwrap()["data"]["k"], "1");
    // A new commit pushed to the server is fetched (incrementally) and applied.
    env.repo.write("app/a.yaml", configmap("a", &[("k", "2")]));
    let head = env.repo.commit("over https");
    server.update(&env.repo, "manifests");
    assert_eq!(sync(true).status.code(), Some(0));
    assert_eq!(env.status()["revision"], head);
    assert_eq!(env.get("configmap", "a").unwrap()["data"]["k"], "2");
}

#[test]
fn real_corpus_manifests_sync_and_messy_folders_are_refused_with_both_files_named() {
    let env = Env::new();
    let corpus = common::data_dir().join("corpus/kubernetes-examples/web");
    let copy = Command::new("cp")
        .arg("-r")
        .arg(&corpus)
        .arg(env.repo.path().join("web"))
        .status()
        .unwrap();
    assert!(copy.success());
    env.repo.commit("kubernetes/examples web/");
    // guestbook-go: six plain manifests.
    let ok = env_for(&env.repo.url(), "web/guestbook-go");
    let out = ok.run(&["sync"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(ok.status()["resources"].as_array().unwrap().len(), 6);
    assert!(ok.get("replicationcontroller", "guestbook").is_some());
    // guestbook: its all-in-one/ and legacy/ folders declare the same objects again.
    let messy = env_for(&env.repo.url(), "web/guestbook");
    let out = messy.run(&["sync"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("web/guestbook/frontend-deployment.yaml") && err.contains("is declared twice"),
        "{err}"
    );
    assert!(
        messy.get("deployment", "frontend").is_none(),
        "nothing applied"
    );
}

#[test]
fn the_agent_survives_an_unreachable_source_and_recovers_without_a_restart() {
    let env = Env::new();
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    // The repository goes away while the agent runs.
    let away = env.dir.path().join("repo-away");
    std::fs::rename(env.repo.path(), &away).unwrap();
    let agent = env.agent();
    env.wait("SourceAvailable=False", Duration::from_secs(30), || {
        let st = env.status();
        st["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "SourceAvailable" && c["status"] == "False")
        }) && st["sync"] == "Unknown"
    });
    // Nothing was deleted; the revision in force is still enforced.
    assert!(env.get("configmap", "a").is_some() && env.get("configmap", "b").is_some());
    env.put(&configmap("a", &[("k", "drift during the outage")]));
    env.wait("revert during the outage", Duration::from_secs(10), || {
        env.get("configmap", "a")
            .is_some_and(|a| a["data"]["k"] == "1")
    });
    let reconciling = env.status()["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Reconciling")
        .unwrap()
        .clone();
    assert_eq!(reconciling["reason"], "RetryScheduled", "{reconciling}");
    // The repository comes back with a new commit: the next retry (5 s backoff) picks it up.
    std::fs::rename(&away, env.repo.path()).unwrap();
    env.repo
        .write("app/a.yaml", configmap("a", &[("k", "after the outage")]));
    let head = env.repo.commit("after");
    env.wait("recovery", Duration::from_secs(30), || {
        env.status()["revision"] == head
    });
    assert_eq!(
        env.get("configmap", "a").unwrap()["data"]["k"],
        "after the outage"
    );
    let st = env.status();
    assert_eq!(st["sync"], "Synced");
    let (code, _) = agent.stop();
    assert_eq!(code, Some(0));
}

#[test]
fn moving_the_branch_back_to_the_revision_in_force_clears_the_error() {
    let env = Env::with_options("1s", "");
    let _agent = env.agent();
    env.wait("first sync", Duration::from_secs(30), || {
        env.status()["sync"] == "Synced"
    });
    let good = env.repo.head();
    env.repo.write(
        "app/bad.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {mode: 0755}\n",
    );
    env.repo.commit("bad");
    env.wait(
        "the bad commit is reported",
        Duration::from_secs(30),
        || env.status()["sync"] == "Unknown",
    );
    env.repo.git(&["reset", "-q", "--hard", &good]);
    env.wait("back to Synced", Duration::from_secs(30), || {
        env.status()["sync"] == "Synced"
    });
    let st = env.status();
    assert_eq!(st["revision"], good);
    assert_eq!(st["lastAttemptedRevision"], good);
    assert_eq!(st["diagnostics"], json!([]));
}

#[test]
fn validate_follows_links_only_inside_the_folder_and_reads_no_special_files() {
    let dir = tempfile::tempdir().unwrap();
    let app = dir.path().join("app");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::write(app.join("a.yaml"), configmap("a", &[])).unwrap();
    let link =
        |target: &str, name: &str| std::os::unix::fs::symlink(target, app.join(name)).unwrap();
    link("/etc/passwd", "passwd.yaml");
    link("../..", "up");
    link(".", "loop");
    link("/dev/zero", "zero.yaml");
    link("a.yaml", "again.yml");
    let fifo = Command::new("mkfifo")
        .arg(app.join("fifo.yaml"))
        .status()
        .unwrap();
    assert!(fifo.success());
    let out = Command::new(env!("CARGO_BIN_EXE_driftless"))
        .arg("validate")
        .arg("app")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    for expected in [
        "app/fifo.yaml:1:1: error: not a regular file; not read",
        "app/loop:1:1: error: symlink `app/loop` leads back into a folder it is in (a cycle)",
        "app/passwd.yaml:1:1: error: symlink `app/passwd.yaml` points outside the folder (`/etc/passwd`); it is not followed",
        "app/up:1:1: error: symlink `app/up` points outside the folder",
        "app/zero.yaml:1:1: error: symlink `app/zero.yaml` points outside the folder",
        "app/again.yml:1:1: error: ConfigMap default/a is declared twice: here and at app/a.yaml:1:1",
    ] {
        assert!(text.contains(expected), "missing `{expected}` in:\n{text}");
    }
    assert!(!text.contains("root:"), "{text}");
}

#[test]
fn store_put_refuses_malformed_resource_versions_and_namespaces() {
    let env = Env::new();
    env.put(&configmap("one", &[("k", "1")]));
    let f = env.dir.path().join("rv.yaml");
    for rv in ["\"abc\"", "\"-1\"", "1.5", "\" 2\"", "[]"] {
        std::fs::write(&f, format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: one, resourceVersion: {rv}}}\ndata: {{k: \"2\"}}\n")).unwrap();
        let out = env.run(&["store", "put", "-f", f.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{rv}: {}", stdout(&out));
        assert!(
            stderr(&out).contains("is not a resourceVersion"),
            "{rv}: {}",
            stderr(&out)
        );
    }
    assert_eq!(
        env.get("configmap", "one").unwrap()["data"]["k"],
        "1",
        "nothing overwritten"
    );
    let bad_ns = env.run(&["store", "put", "-f", f.to_str().unwrap(), "-n", "Bad NS!"]);
    assert_eq!(bad_ns.status.code(), Some(2));
    assert!(
        stderr(&bad_ns).contains("invalid namespace `Bad NS!`"),
        "{}",
        stderr(&bad_ns)
    );
    // A name with a newline and a terminal escape is refused, and the error shows them escaped:
    // no forged line, no escape sequence reaching the terminal.
    std::fs::write(
        &f,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: \"evil\\nforged\\e[31m\"\ndata: {k: v}\n",
    )
    .unwrap();
    let evil = env.run(&["store", "put", "-f", f.to_str().unwrap()]);
    assert_eq!(evil.status.code(), Some(1));
    let err = stderr(&evil);
    assert!(
        err.contains("invalid metadata.name `evil\\nforged\\u{1b}[31m`"),
        "{err}"
    );
    assert!(!err.contains('\u{1b}') && err.lines().count() == 2, "{err}");
}

#[test]
fn a_closed_pipe_ends_output_quietly() {
    let env = Env::new();
    // Far more than a pipe holds (64 KiB), so the writer does meet the closed pipe.
    let big: String = (0..400)
        .map(|i| {
            format!(
                "---\n{}",
                configmap(&format!("c{i}"), &[("blob", &"x".repeat(1000))])
            )
        })
        .collect();
    env.put(&big);
    let sh = format!(
        "'{}' -c '{}' store list -o json | head -c 10 >/dev/null; echo \"${{PIPESTATUS[0]}}\"",
        env!("CARGO_BIN_EXE_driftless"),
        env.config().display()
    );
    let out = Command::new("bash").arg("-c").arg(&sh).output().unwrap();
    // 141 = killed by SIGPIPE, like any Unix filter; never a panic (101).
    let code = stdout(&out).trim().to_string();
    assert!(
        code == "0" || code == "141",
        "exit {code}: {}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
}

/// A peer that closes a socket (an API server or a Git host restarting) raises SIGPIPE at the
/// next write on it: the agent ignores the signal and goes on (it once died of it without a
/// word, which the Kubernetes restart test caught).
#[test]
fn the_agent_survives_sigpipe() {
    let env = Env::new();
    let agent = env.agent();
    env.wait("agent up", Duration::from_secs(30), || {
        env.get("configmap", "a").is_some()
    });
    let (code, log) = agent.signal_then_stop("-PIPE");
    assert_eq!(
        code,
        Some(0),
        "the agent outlived SIGPIPE and stopped on SIGTERM: {log}"
    );
}

#[test]
fn a_second_agent_on_the_same_store_refuses_to_start() {
    let env = Env::new();
    let first = env.agent();
    env.wait("first agent up", Duration::from_secs(30), || {
        env.get("configmap", "a").is_some()
    });
    let second = env.run(&["run"]);
    assert_eq!(second.status.code(), Some(2));
    assert!(
        stderr(&second).contains("another agent is already running on the store"),
        "{}",
        stderr(&second)
    );
    let (code, _) = first.stop();
    assert_eq!(code, Some(0));
    // Once the first is gone, the lock is free again.
    let third = env.agent();
    env.wait("third agent logs", Duration::from_secs(30), || {
        env.log().contains("Agent started")
    });
    let (code, log) = third.stop();
    assert_eq!(code, Some(0), "{log}");
}

/// A fresh store and cache (in the returned folder) for two apps, `a` and `b`, of `repo` at
/// `app-a` and `app-b`; returns the folder and a command builder for `driftless -c <config>`.
fn two_app_project(repo: &common::GitRepo) -> (tempfile::TempDir, impl Fn(&[&str]) -> Command) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("driftless.yaml");
    std::fs::write(
        &config,
        format!(
            "store:\n  sqlite: {{path: store.db}}\ncacheDir: cache\napps:\n  - name: a\n    source: {{repo: {0}, path: app-a}}\n  - name: b\n    source: {{repo: {0}, path: app-b}}\n",
            repo.url()
        ),
    )
    .unwrap();
    let folder = dir.path().to_path_buf();
    let cmd = move |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_driftless"));
        c.arg("-c")
            .arg(folder.join("driftless.yaml"))
            .args(args)
            .current_dir(&folder)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c
    };
    (dir, cmd)
}

/// `driftless sync --app a` and `--app b` started together; their outputs.
fn sync_both(cmd: &impl Fn(&[&str]) -> Command) -> [std::process::Output; 2] {
    let (a, b) = (
        cmd(&["sync", "--app", "a"]).spawn().unwrap(),
        cmd(&["sync", "--app", "b"]).spawn().unwrap(),
    );
    [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()]
}

#[test]
fn two_syncs_on_a_cold_cache_both_create_and_use_it() {
    let repo = common::GitRepo::new();
    repo.write("app-a/a.yaml", configmap("a", &[("k", "1")]))
        .write("app-b/b.yaml", configmap("b", &[("k", "1")]));
    repo.commit("two apps");
    for trial in 0..6 {
        let (dir, cmd) = two_app_project(&repo);
        for (app, out) in ["a", "b"].into_iter().zip(sync_both(&cmd)) {
            assert_eq!(
                out.status.code(),
                Some(0),
                "trial {trial}, app {app}: {}",
                stderr(&out)
            );
        }
        let leftovers: Vec<String> = std::fs::read_dir(dir.path().join("cache/repos"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.ends_with(".fetch-lock"))
            .collect();
        assert_eq!(
            leftovers.len(),
            1,
            "one cache, no half-made ones: {leftovers:?}"
        );
    }
}

#[test]
fn two_syncs_declaring_one_object_never_both_own_it() {
    // Both apps declare the same ConfigMap, identically; it is already live as declared, so
    // neither writes it and only the claim decides.
    let repo = common::GitRepo::new();
    let shared = configmap("shared", &[("k", "same")]);
    repo.write("app-a/shared.yaml", &shared)
        .write("app-b/shared.yaml", &shared)
        .write("app-a/a.yaml", configmap("a", &[("k", "1")]))
        .write("app-b/b.yaml", configmap("b", &[("k", "1")]));
    repo.commit("two apps, one shared object");
    for trial in 0..8 {
        let (dir, cmd) = two_app_project(&repo);
        let put = dir.path().join("shared.yaml");
        std::fs::write(&put, &shared).unwrap();
        assert!(
            cmd(&["store", "put", "-f", put.to_str().unwrap()])
                .status()
                .unwrap()
                .success()
        );
        let outs = sync_both(&cmd);
        let synced = outs.iter().filter(|o| o.status.code() == Some(0)).count();
        let said: String = outs
            .iter()
            .map(|o| format!("{}{}", stdout(o), stderr(o)))
            .collect();
        assert_eq!(synced, 1, "trial {trial}: exactly one app owns it:\n{said}");
        assert!(
            said.contains("also declared by app") || said.contains("OwnershipConflict"),
            "trial {trial}: the other reports the conflict:\n{said}"
        );
    }
}

/// Runs each SQL statement on the environment's SQLite store, behind driftless's back.
fn damage_store(env: &Env, statements: &[&str]) {
    let db = rusqlite::Connection::open(env.dir.path().join("store.db")).unwrap();
    for sql in statements {
        db.execute(sql, []).unwrap();
    }
}

#[test]
fn a_bad_stored_record_is_named_and_skipped_and_store_delete_removes_it() {
    let env = Env::new();
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    // Damage the store behind driftless's back: one object's body is not JSON, and a second
    // app status record does not parse.
    damage_store(
        &env,
        &[
            "UPDATE objects SET body = '{not json' WHERE kind = 'ConfigMap' AND name = 'a'",
            "INSERT INTO objects (grp, kind, ns, name, rev, body) SELECT grp, kind, ns, 'ghost', rev, '{\"apiVersion\": \"driftless.io/v1\", \"kind\": \"AppStatus\", \"metadata\": {\"name\": \"ghost\"}, \"status\": 7}' FROM objects WHERE kind = 'AppStatus' AND name = 'demo'",
        ],
    );
    // The status of the good app is still shown.
    let out = env.run(&["status", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v["apps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["demo"]);
    // `store list` lists the readable objects, names the bad one, and exits 1: the listing is
    // incomplete.
    let out = env.run(&["store", "list"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stdout(&out).contains(" b "), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("ConfigMap default/a: the stored record is unreadable"),
        "{}",
        stderr(&out)
    );
    // `store get` says what is wrong; `store delete` removes it.
    let out = env.run(&["store", "get", "configmap", "a"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("unreadable"), "{}", stderr(&out));
    let out = env.run(&["store", "delete", "configmap", "a"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = env.run(&["store", "list"]);
    assert!(!stderr(&out).contains("unreadable"), "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // And the agent puts the object back as Git declares it.
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    assert_eq!(env.get("configmap", "a").unwrap()["data"]["k"], "1");
    // The app's own status record damaged: `status` says its state cannot be read, not that
    // nothing has run the app.
    damage_store(
        &env,
        &["UPDATE objects SET body = '{not json' WHERE kind = 'AppStatus' AND name = 'demo'"],
    );
    let out = env.run(&["status", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ready = v["apps"][0]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert_eq!(v["apps"][0]["name"], "demo", "{v}");
    assert_eq!(ready["reason"], "Unknown", "{v}");
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .contains("status record cannot be read"),
        "{v}"
    );
    // A sync refuses to run over it (exit 2), until the record is removed; then it writes it
    // again.
    assert_eq!(env.run(&["sync"]).status.code(), Some(2));
    let out = env.run(&["store", "delete", "appstatus.driftless.io", "demo"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    let out = env.run(&["status", "-o", "json"]);
    assert!(!stdout(&out).contains("cannot be read"), "{}", stdout(&out));
}

#[test]
fn an_overlay_or_a_chart_under_the_path_that_cannot_render_applies_nothing_and_says_why() {
    // The Flux example's staging overlay without its base: a folder with a kustomization file
    // is built by kustomize, never applied file by file, and its base is not there.
    let env = Env::new();
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    let overlay = common::data_dir().join("corpus/flux2-kustomize-helm-example/apps/staging");
    for f in std::fs::read_dir(&overlay).unwrap() {
        let f = f.unwrap();
        env.repo.write(
            &format!("app/staging/{}", f.file_name().to_str().unwrap()),
            std::fs::read(f.path()).unwrap(),
        );
    }
    env.repo.write("app/a.yaml", configmap("a", &[("k", "2")]));
    env.repo.commit("an overlay");
    let out = env.run(&["sync"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains(
            "app/staging/kustomization.yaml:4:5: error: `../base/podinfo` does not exist in the repository at this revision"
        ),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        env.get("configmap", "a").unwrap()["data"]["k"],
        "1",
        "nothing applied"
    );
    assert_eq!(env.status()["sync"], "Unknown");
    // `validate` says the same and exits 1.
    let out = env.run(&["validate", env.repo.path().join("app").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out)
            .contains("staging/kustomization.yaml:4:5: error: `../base/podinfo` does not exist"),
        "{}",
        stdout(&out)
    );
    // A chart inside the path is not rendered as part of it (an app of its own renders it).
    env.repo.remove("app/staging");
    env.repo.write(
        "app/chart/Chart.yaml",
        "apiVersion: v2\nname: c\nversion: 0.1.0\n",
    );
    env.repo.commit("a chart");
    let out = env.run(&["sync"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(
            "app/chart/Chart.yaml:1:1: error: a Helm chart inside the app's path is not rendered: give it an app of its own (`source.path: app/chart`"
        ),
        "{}",
        stderr(&out)
    );
    // And kustomize's file name without an extension, naming a file that is not there.
    env.repo.remove("app/chart");
    env.repo
        .write("app/k/Kustomization", "resources: [cm.yaml]\n");
    env.repo.commit("an overlay named Kustomization");
    let out = env.run(&["sync"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("app/k/Kustomization:1:13: error: `cm.yaml` does not exist"),
        "{}",
        stderr(&out)
    );
    // `validate` checks each folder as its own app: one object in two folders is no duplicate.
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("a.yaml"), configmap("a", &[("k", "1")])).unwrap();
    let same = tempfile::tempdir().unwrap();
    std::fs::write(same.path().join("a.yaml"), configmap("a", &[("k", "2")])).unwrap();
    let out = env.run(&[
        "validate",
        other.path().to_str().unwrap(),
        same.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("2 file(s), 2 object(s)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_damaged_repository_cache_is_discarded_and_cloned_again() {
    let env = Env::new();
    // Served over the Git protocol, so that the cache holds packs of its own (a repository on
    // this machine is only an alternate of the cache: nothing of it is copied there).
    let daemon = common::GitDaemon::start(env.repo.path().parent().unwrap());
    let url = daemon.url(env.repo.path().file_name().unwrap().to_str().unwrap());
    let config = std::fs::read_to_string(env.config()).unwrap();
    let served = config.replace(
        &format!("repo: {}\n", env.repo.url()),
        &format!("repo: {url}\n"),
    );
    assert_ne!(config, served);
    std::fs::write(env.config(), served).unwrap();
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    // Truncate every pack of the cache, as an interrupted gc or a full disk could.
    let mut damaged = 0;
    for repo in std::fs::read_dir(env.dir.path().join("cache/repos")).unwrap() {
        let pack_dir = repo.unwrap().path().join("objects/pack");
        let Ok(packs) = std::fs::read_dir(&pack_dir) else {
            continue;
        };
        for p in packs {
            let p = p.unwrap().path();
            if p.extension().is_some_and(|e| e == "pack") {
                let bytes = std::fs::read(&p).unwrap();
                let mut perms = std::fs::metadata(&p).unwrap().permissions();
                #[allow(clippy::permissions_set_readonly_false)]
                perms.set_readonly(false);
                std::fs::set_permissions(&p, perms).unwrap();
                std::fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
                damaged += 1;
            }
        }
    }
    assert!(damaged > 0, "the cache holds packs");
    env.repo.write("app/a.yaml", configmap("a", &[("k", "2")]));
    env.repo.commit("a change");
    applied_after_the_cache_is_repaired(&env, |out, err| {
        err.contains("damaged") || out.contains("cache")
    });
}

#[test]
fn a_corrupted_ref_file_in_the_repository_cache_is_repaired_too() {
    // Found by an attack: a ref file of the cache that does not parse failed every later fetch
    // (the last good revision stayed in force, but no new commit was ever applied).
    let env = Env::new();
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    let mut corrupted = 0;
    for repo in std::fs::read_dir(env.dir.path().join("cache/repos")).unwrap() {
        let heads = repo.unwrap().path().join("refs/driftless/heads");
        let Ok(refs) = std::fs::read_dir(&heads) else {
            continue;
        };
        for r in refs {
            std::fs::write(r.unwrap().path(), "garbage\n").unwrap();
            corrupted += 1;
        }
    }
    assert!(
        corrupted > 0,
        "the cache keeps the fetched branch as a loose ref"
    );
    env.repo.write("app/a.yaml", configmap("a", &[("k", "2")]));
    env.repo.commit("a change");
    applied_after_the_cache_is_repaired(&env, |out, err| {
        out.contains("corrupted") || err.contains("corrupted")
    });
}

/// After damage to the repository cache and a commit setting `a`'s `k` to 2: the first sync
/// may fail on the damage (nothing applied; `says` holds of its standard output and error) and
/// removes the cache; the next one clones again and applies.
fn applied_after_the_cache_is_repaired(env: &Env, says: impl Fn(&str, &str) -> bool) {
    let first = env.run(&["sync"]);
    if first.status.code() != Some(0) {
        let (out, err) = (stdout(&first), stderr(&first));
        assert!(says(&out, &err), "{out}{err}");
        assert_eq!(env.get("configmap", "a").unwrap()["data"]["k"], "1");
        let second = env.run(&["sync"]);
        assert_eq!(
            second.status.code(),
            Some(0),
            "{}{}",
            stdout(&second),
            stderr(&second)
        );
    }
    assert_eq!(env.get("configmap", "a").unwrap()["data"]["k"], "2");
}

#[test]
fn command_line_durations_are_bounded_like_the_configs() {
    let env = Env::new();
    let out = env.run(&["wait", "--timeout", "99999999999y"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("longer than 100 years"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn status_needs_a_config_and_lists_apps_not_synced_yet() {
    let env = Env::new();
    // Before anything ran: the configured app is listed, not synced yet.
    let out = env.run(&["status", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["apps"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["apps"][0]["name"], "demo");
    assert_eq!(v["apps"][0]["sync"], "Unknown");
    assert_eq!(v["apps"][0]["conditions"][0]["reason"], "NotSyncedYet");
    // Without a config (none given, none in the folder) it says so, like the other commands.
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_driftless"))
        .arg("status")
        .current_dir(empty.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no config"), "{}", stderr(&out));
}

#[test]
fn store_kind_names_resolve_as_kubectl_does() {
    let env = Env::new();
    // A custom kind spelled like a short name, and a ConfigMap kind in another group.
    env.put("apiVersion: example.com/v1\nkind: Cm\nmetadata:\n  name: x\nspec: {a: 1}\n");
    env.put(&configmap("x", &[("k", "core")]));
    env.put("apiVersion: example.com/v1\nkind: ConfigMap\nmetadata:\n  name: dup\nspec: {a: 1}\n");
    env.put(&configmap("dup", &[("k", "core")]));
    env.put("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: far\n  namespace: prod\ndata: {k: v}\n");
    // `cm` names the kind spelled `Cm` exactly, not the short name of ConfigMap.
    let out = env.run(&["store", "get", "cm", "x", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"], "Cm");
    // A kind in the core group and another: the core one, as kubectl does.
    let out = env.run(&["store", "get", "configmap", "dup", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["apiVersion"], "v1");
    // -A lists every namespace.
    let out = env.run(&["store", "list", "configmap", "-A"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("far"), "{}", stdout(&out));
    // A kind with no objects says so rather than printing an empty table silently.
    let out = env.run(&["store", "list", "foo"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("no objects of kind `foo`"),
        "{}",
        stderr(&out)
    );
    // Not found here, found elsewhere: the hint names where.
    let out = env.run(&["store", "get", "configmap", "far"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("exists in namespace(s) prod"),
        "{}",
        stderr(&out)
    );
    // kubectl's KIND/NAME form, for get and delete.
    let out = env.run(&["store", "get", "configmap/far", "-n", "prod", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["metadata"]["name"], "far");
    let out = env.run(&["store", "get", "configmap/far", "far"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("KIND/NAME"), "{}", stderr(&out));
    // Several kinds at once, comma-separated.
    env.put("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: prod\n");
    let out = env.run(&["store", "list", "ns,configmaps", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let kinds: BTreeSet<&str> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, BTreeSet::from(["ConfigMap", "Namespace"]), "{v}");
    // Several kinds in one get, as kubectl takes them: what exists is printed, exit 1 for
    // the missing one.
    let out = env.run(&[
        "store",
        "get",
        "configmap,ns",
        "prod",
        "-n",
        "prod",
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"], "Namespace", "{v}");
    let out = env.run(&["store", "get", "configmap,cm", "x", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"], "List", "{v}");
    assert_eq!(v["items"].as_array().unwrap().len(), 2, "{v}");
    // driftless's own records need their group named; the note says so.
    let out = env.run(&["store", "get", "inventory", "demo"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("name it as `inventory.driftless.io`"),
        "{}",
        stderr(&out)
    );
    // -n is ignored for a cluster-scoped object, as kubectl ignores it.
    let out = env.run(&["store", "list", "ns", "-n", "default"]);
    assert!(stdout(&out).contains("prod"), "{}", stdout(&out));
    let out = env.run(&["store", "get", "ns", "prod", "-n", "default"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = env.run(&["store", "delete", "namespace/prod", "-n", "default"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(env.get("namespace", "prod").is_none());
}

#[test]
fn a_run_that_cannot_listen_creates_nothing() {
    let env = Env::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let config = std::fs::read_to_string(env.config())
        .unwrap()
        .replace("listen: \"127.0.0.1:0\"", &format!("listen: \"{addr}\""));
    std::fs::write(env.config(), config).unwrap();
    let before: std::collections::BTreeSet<_> = std::fs::read_dir(env.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let out = env.run(&["run"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("cannot listen on"),
        "{}",
        stderr(&out)
    );
    let after: std::collections::BTreeSet<_> = std::fs::read_dir(env.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(before, after, "no new files");
}

#[test]
fn diff_takes_a_revision_relative_to_the_apps_ref() {
    let env = Env::new();
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    env.repo.write("app/a.yaml", configmap("a", &[("k", "2")]));
    env.repo.commit("two");
    env.repo.write("app/a.yaml", configmap("a", &[("k", "3")]));
    env.repo.commit("three");
    // The store holds k=1; HEAD~1 declares 2, HEAD~2 is what is applied.
    let out = env.run(&["diff", "--revision", "HEAD~1"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stdout(&out).contains("+  k: \"2\""), "{}", stdout(&out));
    let out = env.run(&["diff", "--revision", "HEAD~2"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let out = env.run(&["diff", "--revision", "main^"]);
    assert!(stdout(&out).contains("+  k: \"2\""), "{}", stdout(&out));
    // An ancestor that does not exist is an error naming it.
    let out = env.run(&["diff", "--revision", "HEAD~9"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(stderr(&out).contains("~9"), "{}", stderr(&out));
}

/// The config of one app, `app`, syncing `repo`'s folder `app/` into a SQLite store in `dir`
/// (`store.db`, cache in `cache/`), loaded as the agent loads it.
fn sqlite_app_config(dir: &std::path::Path, repo: &common::GitRepo) -> driftless::config::Loaded {
    let path = dir.join("driftless.yaml");
    std::fs::write(
        &path,
        format!(
            "store:\n  sqlite: {{path: {}}}\ncacheDir: {}\napps:\n  - name: app\n    source: {{repo: {}, path: app}}\n",
            dir.join("store.db").display(),
            dir.join("cache").display(),
            repo.url()
        ),
    )
    .unwrap();
    driftless::config::load(&path).unwrap()
}

/// A sync that cannot claim or release objects (its desired keys are its inventory's) does
/// not wait for the other apps' syncs, which the agent serializes so that two apps never both
/// claim a key; one that declares a new object does wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_that_claims_nothing_does_not_wait_for_other_apps_syncs() {
    use driftless::reconcile::{App, Trigger};
    use std::sync::Arc;
    let repo = common::GitRepo::new();
    repo.write("app/a.yaml", configmap("a", &[("k", "1")]));
    repo.write("README", "one");
    repo.commit("one");
    let dir = tempfile::tempdir().unwrap();
    let cfg = sqlite_app_config(dir.path(), &repo);
    let store: Arc<dyn driftless::store::Store> = Arc::new(
        driftless::store::sqlite::SqliteStore::open(
            &dir.path().join("store.db"),
            Default::default(),
        )
        .unwrap(),
    );
    let claim = Arc::new(tokio::sync::Mutex::new(()));
    let mut app = App::load(
        cfg.config.apps[0].clone(),
        store,
        driftless::source::GitCache::new(&cfg.config.cache_dir),
        claim.clone(),
        false,
    )
    .await
    .unwrap();
    app.reconcile(Trigger::Fetch).await;
    assert_eq!(app.status().sync, driftless::status::SyncStatus::Synced);
    // Another app's sync holds the lock.
    let held = claim.lock().await;
    repo.write("README", "two");
    let two = repo.commit("two: nothing of the app's");
    tokio::time::timeout(Duration::from_secs(10), app.reconcile(Trigger::Fetch))
        .await
        .expect("a sync that claims nothing does not wait for the lock");
    assert_eq!(app.status().revision.as_deref(), Some(two.as_str()));
    repo.write("app/b.yaml", configmap("b", &[("k", "1")]));
    repo.commit("three: a new object");
    assert!(
        tokio::time::timeout(Duration::from_millis(1500), app.reconcile(Trigger::Fetch))
            .await
            .is_err(),
        "a sync that claims a new object waits for the lock"
    );
    drop(held);
}

#[test]
fn a_lowercase_crd_kind_is_applied_and_its_health_follows_its_status() {
    // The Zalando postgres operator's kind is `postgresql`: any kind a CRD declares is accepted.
    let env = Env::new();
    env.repo.write(
        "app/crd.yaml",
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: postgresqls.acid.zalan.do}\nspec:\n  group: acid.zalan.do\n  names: {kind: postgresql, listKind: postgresqlList, plural: postgresqls, singular: postgresql}\n  scope: Namespaced\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    subresources: {status: {}}\n    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}\n",
    );
    env.repo.write(
        "app/db.yaml",
        "apiVersion: acid.zalan.do/v1\nkind: postgresql\nmetadata: {name: orders-db, namespace: shop}\nspec:\n  teamId: orders\n  numberOfInstances: 2\n  postgresql: {version: \"16\"}\n  volume: {size: 10Gi}\n",
    );
    env.repo.commit("a database");
    sync_ok(&env);
    let db = |st: &Value| {
        st["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["kind"] == "postgresql")
            .cloned()
            .expect("the postgresql is in the status")
    };
    let st = env.status();
    let r = db(&st);
    assert_eq!(
        (r["name"].as_str(), r["sync"].as_str()),
        (Some("orders-db"), Some("Synced"))
    );
    // Applied, and no controller has reported on it yet.
    assert_eq!(r["health"], "Progressing", "{r}");
    assert_eq!(st["health"], "Progressing");
    // The operator reports (its status, written beside Git's fields).
    let live = |phase: &str| {
        format!(
            "apiVersion: acid.zalan.do/v1\nkind: postgresql\nmetadata: {{name: orders-db, namespace: shop}}\nspec:\n  teamId: orders\n  numberOfInstances: 2\n  postgresql: {{version: \"16\"}}\n  volume: {{size: 10Gi}}\nstatus: {{PostgresClusterStatus: {phase}}}\n"
        )
    };
    // The API server establishes the CRD (nothing does in a SQLite store: until then the CRD
    // is Progressing too).
    assert_eq!(
        st["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["kind"] == "CustomResourceDefinition")
            .unwrap()["health"],
        "Progressing"
    );
    env.put("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: postgresqls.acid.zalan.do}\nspec:\n  group: acid.zalan.do\n  names: {kind: postgresql, listKind: postgresqlList, plural: postgresqls, singular: postgresql}\n  scope: Namespaced\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    subresources: {status: {}}\n    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}\nstatus:\n  conditions:\n  - {type: NamesAccepted, status: \"True\", reason: NoConflicts}\n  - {type: Established, status: \"True\", reason: InitialNamesAccepted}\n");
    for (phase, health) in [("Running", "Healthy"), ("SyncFailed", "Degraded")] {
        env.put(&live(phase));
        let out = env.run(&["sync"]);
        assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
        let st = env.status();
        let r = db(&st);
        assert_eq!(r["health"], health, "{phase}: {r}");
        assert_eq!(st["health"], health, "{phase}");
    }
}

#[test]
fn the_agent_keeps_running_when_a_lua_health_check_loops_or_fails() {
    let env = Env::new();
    let config = std::fs::read_to_string(env.config()).unwrap();
    let checks = common::data_dir().join("health/lua-failing");
    std::fs::write(
        env.config(),
        format!("healthLuaDir: {}\n{config}", checks.display()),
    )
    .unwrap();
    env.repo.write(
        "app/checks.yaml",
        "apiVersion: example.com/v1\nkind: Spinner\nmetadata: {name: loops, namespace: default}\n---\napiVersion: example.com/v1\nkind: Boom\nmetadata: {name: raises, namespace: default}\n",
    );
    env.repo.commit("objects whose health checks fail");
    let agent = env.agent();
    let resource = |kind: &str| {
        env.status()["resources"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["kind"] == kind).cloned())
    };
    env.wait("both assessed", Duration::from_secs(60), || {
        resource("Spinner").is_some_and(|r| r["health"] == "Unknown")
            && resource("Boom").is_some_and(|r| r["health"] == "Unknown")
    });
    let spinner = resource("Spinner").unwrap();
    assert!(
        spinner["healthMessage"]
            .as_str()
            .is_some_and(|m| m.contains("time limit of 1 s")),
        "{spinner}"
    );
    let boom = resource("Boom").unwrap();
    assert!(
        boom["healthMessage"]
            .as_str()
            .is_some_and(|m| m.contains("boom: raises")),
        "{boom}"
    );
    assert_eq!(env.status()["health"], "Unknown");
    // The agent goes on: a drift is still reverted, and it stops cleanly.
    env.put(&configmap("a", &[("k", "changed by hand")]));
    env.wait("revert", Duration::from_secs(30), || {
        env.get("configmap", "a")
            .is_some_and(|a| a["data"]["k"] == "1")
    });
    let (code, log) = agent.stop();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn an_object_without_status_is_judged_by_a_crd_found_only_in_the_store() {
    // The app declares a custom object but not its CRD: the agent's status update reads the
    // store's CRDs (put there by another tool) to learn the kind has a status subresource.
    let env = Env::new();
    env.repo.write(
        "app/queue.yaml",
        "apiVersion: mq.example.com/v1\nkind: Queue\nmetadata: {name: orders, namespace: default}\nspec: {durable: true}\n",
    );
    env.repo.write(
        "app/route.yaml",
        "apiVersion: mw.example.com/v1\nkind: Middleware\nmetadata: {name: strip, namespace: default}\nspec: {prefix: /api}\n",
    );
    env.repo
        .commit("a queue and a middleware, their CRDs installed elsewhere");
    let crd = |group: &str, kind: &str, plural: &str, status: bool| {
        format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: {plural}.{group}}}\nspec:\n  group: {group}\n  names: {{kind: {kind}, plural: {plural}}}\n  scope: Namespaced\n  versions:\n  - name: v1\n    served: true\n    storage: true\n{}",
            if status {
                "    subresources: {status: {}}\n"
            } else {
                ""
            }
        )
    };
    env.put(&crd("mq.example.com", "Queue", "queues", true));
    env.put(&crd("mw.example.com", "Middleware", "middlewares", false));
    let out = env.run(&["sync"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let st = env.status();
    let health = |kind: &str| {
        st["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["kind"] == kind)
            .map(|r| (r["health"].clone(), r["healthMessage"].clone()))
            .unwrap()
    };
    let (queue, why) = health("Queue");
    assert_eq!(queue, "Progressing", "{why}");
    assert!(
        why.as_str().unwrap().contains("waiting for the controller"),
        "{why}"
    );
    // A kind whose CRD has no status subresource: nothing will report, and nothing is awaited.
    assert_eq!(health("Middleware").0, "Healthy");
}

/// A store that counts the objects it reads whole (found by `get`, `get_many`, `list`; not
/// driftless's own records), around SQLite.
struct CountingStore {
    inner: driftless::store::sqlite::SqliteStore,
    read: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl driftless::store::Store for CountingStore {
    async fn get(
        &self,
        k: &driftless::object::ObjectKey,
    ) -> driftless::store::Result<Option<driftless::object::Object>> {
        let found = self.inner.get(k).await?;
        if !k.is_reserved() && found.is_some() {
            self.read.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(found)
    }
    async fn version_of(
        &self,
        k: &driftless::object::ObjectKey,
    ) -> driftless::store::Result<Option<u64>> {
        self.inner.version_of(k).await
    }
    async fn get_many(
        &self,
        k: &[driftless::object::ObjectKey],
    ) -> driftless::store::Result<driftless::store::Listing> {
        let listing = self.inner.get_many(k).await?;
        let objects = listing.objects.keys().filter(|k| !k.is_reserved()).count();
        self.read
            .fetch_add(objects, std::sync::atomic::Ordering::SeqCst);
        Ok(listing)
    }
    async fn versions(
        &self,
        k: &[&driftless::object::ObjectKey],
    ) -> driftless::store::Result<Vec<driftless::store::Version>> {
        self.inner.versions(k).await
    }
    async fn list(
        &self,
        s: &driftless::store::Selector,
    ) -> driftless::store::Result<driftless::store::Listing> {
        let listing = self.inner.list(s).await?;
        let objects = listing.objects.keys().filter(|k| !k.is_reserved()).count();
        self.read
            .fetch_add(objects, std::sync::atomic::Ordering::SeqCst);
        Ok(listing)
    }
    async fn commit(
        &self,
        w: Vec<driftless::store::Write>,
    ) -> driftless::store::Result<driftless::store::Committed> {
        self.inner.commit(w).await
    }
    async fn revision(&self) -> driftless::store::Result<u64> {
        self.inner.revision().await
    }
    async fn watch(&self, from: u64) -> driftless::store::Result<driftless::store::Watch> {
        self.inner.watch(from).await
    }
    fn backend(&self) -> &'static str {
        "counting sqlite"
    }
    fn promises(&self) -> driftless::store::Promises {
        self.inner.promises()
    }
}

/// What one process found as declared is kept (the `Verified` record): the next process
/// (`driftless sync` again, a restarted agent) neither reads nor plans an object that has not
/// moved since, and still reads, plans and reverts one that has. A record for another desired
/// set, another inventory or a corrupt one is only a missed shortcut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_process_reads_only_the_objects_that_moved_since_the_last_found_them_as_declared() {
    use driftless::object::{Object, ObjectKey};
    use driftless::reconcile::{App, Trigger};
    use driftless::store::{Precondition, Store, Write};
    use std::sync::Arc;
    use std::sync::atomic::Ordering::SeqCst;
    let repo = common::GitRepo::new();
    for n in ["a", "b", "c"] {
        repo.write(&format!("app/{n}.yaml"), configmap(n, &[("k", "1")]));
    }
    repo.commit("one");
    let dir = tempfile::tempdir().unwrap();
    let cfg = sqlite_app_config(dir.path(), &repo);
    // One pass of a new process: (objects read, created, updated, unchanged, sync status).
    let process = async |rules: driftless::health::CustomRules| {
        let store = Arc::new(CountingStore {
            inner: driftless::store::sqlite::SqliteStore::open(
                &dir.path().join("store.db"),
                Default::default(),
            )
            .unwrap(),
            read: Default::default(),
        });
        let mut app = App::load(
            cfg.config.apps[0].clone(),
            store.clone(),
            driftless::source::GitCache::new(&cfg.config.cache_dir),
            Arc::new(tokio::sync::Mutex::new(())),
            false,
        )
        .await
        .unwrap()
        .with_health_rules(rules);
        let (_, report) = app.reconcile(Trigger::Manual).await;
        let s = report.summary;
        (
            store.read.load(SeqCst),
            s.create,
            s.update,
            s.unchanged,
            app.status().sync,
        )
    };
    let none = driftless::health::CustomRules::none;
    use driftless::status::SyncStatus::Synced;
    assert_eq!(process(none()).await, (0, 3, 0, 0, Synced));
    // Nothing moved: nothing read.
    assert_eq!(process(none()).await, (0, 0, 0, 3, Synced));
    // One object changed out of band: only it is read, and it is reverted.
    let raw = driftless::store::sqlite::SqliteStore::open(
        &dir.path().join("store.db"),
        Default::default(),
    )
    .unwrap();
    let drifted = Object::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": "default"}, "data": {"k": "drift"}})).unwrap();
    raw.commit(vec![Write::Put {
        object: drifted,
        precondition: Precondition::Any,
        json: None,
    }])
    .await
    .unwrap();
    assert_eq!(process(none()).await, (1, 0, 1, 2, Synced));
    let b = ObjectKey::new("", "ConfigMap", "default", "b");
    assert_eq!(
        raw.get(&b).await.unwrap().unwrap().get("data"),
        Some(&json!({"k": "1"}))
    );
    // The revert was written as planned: nothing to read again.
    assert_eq!(process(none()).await, (0, 0, 0, 3, Synced));
    // Custom health rules: the health the last process recorded may not be theirs, so every
    // object is read (and assessed) again.
    let rule =
        driftless::health::CustomRule::new("", "ConfigMap", Some("true"), None, None).unwrap();
    let rules = driftless::health::CustomRules::new(vec![rule]);
    assert_eq!(process(rules).await, (3, 0, 0, 3, Synced));
    // A corrupt record is ignored: everything is read, and the next pass writes a good one.
    let record = driftless::sync::Persisted::record_key("app");
    let mut spec = serde_json::Map::new();
    spec.insert("spec".into(), json!({"versions": "garbage"}));
    raw.commit(vec![Write::Put {
        object: Object::reserved(driftless::sync::VERIFIED_KIND, "app", spec),
        precondition: Precondition::Any,
        json: None,
    }])
    .await
    .unwrap();
    assert_eq!(
        raw.get(&record).await.unwrap().unwrap().get("spec"),
        Some(&json!({"versions": "garbage"}))
    );
    assert_eq!(process(none()).await, (3, 0, 0, 3, Synced));
    assert_eq!(process(none()).await, (0, 0, 0, 3, Synced));
    // The status record deleted (`store delete appstatus.driftless.io`): the health of the
    // objects skipped would be lost, so everything is read and assessed again.
    raw.commit(vec![Write::Delete {
        key: driftless::status::AppStatus::record_key("app"),
        precondition: Precondition::Any,
    }])
    .await
    .unwrap();
    assert_eq!(process(none()).await, (3, 0, 0, 3, Synced));
    assert_eq!(process(none()).await, (0, 0, 0, 3, Synced));
    // A file a link points to changes while the app's folder does not: a new process reads
    // the revision anew and applies it.
    repo.write("shared/s.yaml", configmap("s", &[("k", "1")]));
    repo.symlink("app/s.yaml", "../shared/s.yaml");
    repo.commit("a linked file");
    let (_, created, _, _, _) = process(none()).await;
    assert_eq!(created, 1);
    assert_eq!(process(none()).await, (0, 0, 0, 4, Synced));
    repo.write("shared/s.yaml", configmap("s", &[("k", "2")]));
    repo.commit("the linked file changes");
    let (_, _, updated, _, sync) = process(none()).await;
    assert_eq!((updated, sync), (1, Synced));
    assert_eq!(process(none()).await, (0, 0, 0, 4, Synced));
    // A new commit: a new desired set, planned whole; then nothing again.
    repo.write("app/a.yaml", configmap("a", &[("k", "2")]));
    repo.write("app/d.yaml", configmap("d", &[("k", "1")]));
    repo.commit("two");
    let (_, created, updated, _, sync) = process(none()).await;
    assert_eq!((created, updated, sync), (1, 1, Synced));
    assert_eq!(process(none()).await, (0, 0, 0, 5, Synced));
}

/// One `driftless sync` that succeeds: (it parsed the revision, it took the set up from the
/// inventory, its standard output).
fn sync_taking_up(env: &Env) -> (bool, bool, String) {
    let out = env
        .cmd()
        .arg("sync")
        .env("RUST_LOG", "driftless=debug")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let log = stderr(&out);
    (
        log.contains("Manifests parsed"),
        log.contains("taken up from the inventory"),
        stdout(&out),
    )
}

/// A new `driftless sync` whose revision has the same files at the app's path as the set the
/// last process applied (plain manifests, same build of driftless) takes that set up from the
/// inventory instead of parsing the revision again; it still finds and reverts what moved out
/// of band. A changed file in the path, or a Verified record whose digest is not the
/// inventory's, makes the next process read the revision again.
#[test]
fn a_new_process_takes_up_an_unchanged_set_from_the_inventory_without_parsing_it() {
    use driftless::store::{Precondition, Store, Write};
    let env = Env::new();
    let sync = sync_taking_up;
    let (parsed, taken, out) = sync(&env);
    assert!(parsed && !taken, "{out}");
    assert!(out.contains("2 created"), "{out}");
    let (parsed, taken, out) = sync(&env);
    assert!(!parsed && taken, "the same files: not parsed again; {out}");
    assert!(out.contains("2 unchanged"), "{out}");
    // A commit outside the app's path: the same files, still not parsed.
    env.repo.write("elsewhere/x.txt", "x");
    let head = env.repo.commit("elsewhere");
    let (parsed, taken, _) = sync(&env);
    assert!(!parsed && taken);
    assert_eq!(env.status()["revision"], head.as_str());
    // Drift out of band: found and reverted without parsing.
    env.put(&configmap("a", &[("k", "drift")]));
    let (parsed, taken, out) = sync(&env);
    assert!(!parsed && taken);
    assert!(out.contains("1 updated"), "{out}");
    assert_eq!(env.get("configmap", "a").unwrap()["data"]["k"], "1");
    // A file in the path changes: parsed and applied.
    env.repo.write("app/b.yaml", configmap("b", &[("k", "2")]));
    env.repo.commit("b changes");
    let (parsed, taken, out) = sync(&env);
    assert!(parsed && !taken, "{out}");
    assert!(out.contains("1 updated"), "{out}");
    assert_eq!(env.get("configmap", "b").unwrap()["data"]["k"], "2");
    let (parsed, taken, _) = sync(&env);
    assert!(!parsed && taken);
    // A Verified record whose digest is not the inventory's entries': read again.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = driftless::store::sqlite::SqliteStore::open(
            &env.dir.path().join("store.db"),
            Default::default(),
        )
        .unwrap();
        let key = driftless::sync::Persisted::record_key("demo");
        let record = store.get(&key).await.unwrap().unwrap();
        let mut p = driftless::sync::Persisted::from_record(&record).unwrap();
        assert!(p.reuse.is_some());
        p.digest = "0".repeat(64);
        store
            .commit(vec![Write::Put {
                object: p.to_record("demo"),
                precondition: Precondition::Any,
                json: None,
            }])
            .await
            .unwrap();
    });
    let (parsed, taken, out) = sync(&env);
    assert!(parsed && !taken, "{out}");
    assert!(out.contains("2 unchanged"), "{out}");
    let (parsed, taken, _) = sync(&env);
    assert!(!parsed && taken, "the next process writes a good record");
    // The same build copied elsewhere (same build id): it reads the files as this one does,
    // so it takes the set up too.
    let run = |exe: &std::path::Path| {
        // A copy just written can be busy for a moment ("Text file busy"): another test's
        // process forked while the copy was open for writing holds it until it runs its own
        // program. Tried again then.
        let mut tries = 0;
        let out = loop {
            match Command::new(exe)
                .arg("-c")
                .arg(env.config())
                .arg("sync")
                .current_dir(env.dir.path())
                .env("RUST_LOG", "driftless=debug")
                .output()
            {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 50 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => break other.unwrap(),
            }
        };
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        out
    };
    let exe = std::fs::read(env!("CARGO_BIN_EXE_driftless")).unwrap();
    let copy = env.dir.path().join("driftless-copy");
    std::fs::write(&copy, &exe).unwrap();
    std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = run(&copy);
    assert!(
        stderr(&out).contains("taken up from the inventory"),
        "{}",
        stderr(&out)
    );
    // Another build of driftless (here: the same bytes with another build id, equal in size
    // and modification time): its parser may read the files otherwise, so it reads them again.
    let id = driftless::render::gnu_build_id(&mut std::fs::File::open(&copy).unwrap())
        .expect("the test binary has a GNU build id");
    let at = exe
        .windows(id.len())
        .position(|w| w == id.as_slice())
        .unwrap();
    let mut other_bytes = exe.clone();
    other_bytes[at] ^= 0xff;
    let other = env.dir.path().join("driftless-other");
    std::fs::write(&other, &other_bytes).unwrap();
    std::fs::set_permissions(&other, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mtime = std::fs::metadata(&copy).unwrap().modified().unwrap();
    for f in [&copy, &other] {
        std::fs::File::options()
            .write(true)
            .open(f)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
    }
    let out = run(&other);
    assert!(
        stderr(&out).contains("Manifests parsed"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).contains("2 unchanged"), "{}", stdout(&out));
}

/// The same with a desired set large enough that its digest is made on a thread of its own
/// beside the sync (512 objects or more): the next process takes the set up, so the digest the
/// first one recorded is the one of the set it read.
#[test]
fn a_large_set_is_taken_up_by_the_next_process_with_the_digest_made_beside_the_sync() {
    let env = Env::new();
    let docs: Vec<String> = (0..600)
        .map(|i| configmap(&format!("c{i:03}"), &[("i", &i.to_string())]))
        .collect();
    env.repo.write("app/many.yaml", docs.join("---\n"));
    env.repo.commit("600 more");
    let sync = sync_taking_up;
    let (parsed, taken, out) = sync(&env);
    assert!(parsed && !taken, "{out}");
    assert!(out.contains("602 created"), "{out}");
    let (parsed, taken, out) = sync(&env);
    assert!(!parsed && taken, "the same files: not parsed again; {out}");
    assert!(out.contains("602 unchanged"), "{out}");
}

/// The running agent records what its passes found as declared when it stops (as a one-shot
/// sync does after each pass), so a restarted agent takes the set up from the inventory instead
/// of parsing the revision and reading every object again; what moved while no agent ran is
/// still found and reverted.
#[test]
fn a_restarted_agent_takes_up_what_the_stopped_one_applied() {
    let env = Env::new();
    // Stops an agent, and checks whether its first pass parsed the revision and whether it
    // took the set up, showing the log when not as `want`.
    let stop = |agent: common::Agent, want: (bool, bool), what: &str| {
        let (code, log) = agent.stop();
        assert_eq!(code, Some(0), "{log}");
        let found = (
            log.contains("Manifests parsed"),
            log.contains("taken up from the inventory"),
        );
        assert_eq!(found, want, "{what}: {log}");
    };
    let agent = env.agent();
    env.wait("first sync", Duration::from_secs(30), || {
        env.get("configmap", "a").is_some()
    });
    // A drift reverted by the first agent: the record names the version after the revert.
    env.put(&configmap("a", &[("k", "changed by hand")]));
    env.wait("revert", Duration::from_secs(10), || {
        env.get("configmap", "a")
            .is_some_and(|a| a["data"]["k"] == "1")
    });
    stop(agent, (true, false), "the first agent parses");
    // Restarted: taken up, not parsed.
    let agent = env.agent();
    env.wait(
        "the second agent's first pass",
        Duration::from_secs(30),
        || {
            env.log()
                .contains("Verified record of the last process taken up")
        },
    );
    stop(agent, (false, true), "restarted: taken up");
    // Drift while no agent runs: the third agent takes the set up and still reverts it.
    env.put(&configmap("b", &[("k", "changed while stopped")]));
    let agent = env.agent();
    env.wait("revert after a restart", Duration::from_secs(30), || {
        env.get("configmap", "b")
            .is_some_and(|b| b["data"]["k"] == "1")
    });
    stop(agent, (false, true), "restarted after drift: taken up");
}

/// An object as deep as the parser takes is applied, read back by `store get` and by the next
/// process's inventory, and recreated after an out-of-band delete; one level deeper is refused
/// with its file, not applied (its JSON would be past serde_json's recursion limit, unreadable).
#[test]
fn an_object_as_deep_as_the_parser_takes_round_trips_and_one_deeper_is_refused() {
    let env = Env::new();
    // The document's mapping and `spec` are 2 levels; 125 lists in `x` make 127.
    let deep = |lists: usize| {
        format!(
            "apiVersion: example.com/v1\nkind: Thing\nmetadata:\n  name: deep\nspec:\n  x: {}1{}\n",
            "[".repeat(lists),
            "]".repeat(lists)
        )
    };
    env.repo.write("app/deep.yaml", deep(125));
    env.repo.commit("deep");
    let out = env.cmd().arg("sync").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let get = env.run(&["store", "get", "thing.example.com", "deep"]);
    assert_eq!(get.status.code(), Some(0), "{}", stderr(&get));
    // Deleted out of band: the next process reads its inventory entry and recreates it.
    let del = env.run(&["store", "delete", "thing.example.com", "deep"]);
    assert_eq!(del.status.code(), Some(0), "{}", stderr(&del));
    let out = env.cmd().arg("sync").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("1 created"), "{}", stdout(&out));
    assert_eq!(
        env.run(&["store", "get", "thing.example.com", "deep"])
            .status
            .code(),
        Some(0)
    );
    // One level deeper: refused where it is written, nothing applied or deleted.
    env.repo.write("app/deep.yaml", deep(126));
    env.repo.commit("deeper");
    let out = env.cmd().arg("sync").output().unwrap();
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(0));
    assert_ne!(out.status.code(), Some(101), "a panic: {err}");
    assert!(
        err.contains("app/deep.yaml") && err.contains("nested deeper than the parser allows"),
        "{err}"
    );
    let get = env.run(&["store", "get", "thing.example.com", "deep"]);
    assert_eq!(get.status.code(), Some(0), "{}", stderr(&get));
}
