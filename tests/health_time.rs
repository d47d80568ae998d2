//! Health in the running agent, and what time does to it: progress deadlines, the gap's age,
//! fights with another writer, sync windows, and `driftless wait` / `health` / offline `diff`.
//! The real binary, real Git repositories, short durations.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Env, configmap, stderr, stdout};
use serde_json::{Value, json};

fn deployment(replicas: u32) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    spec:\n      containers: [{{name: web, image: nginx}}]\n"
    )
}

fn condition(env: &Env, type_: &str) -> Value {
    env.status()["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_).cloned())
        .unwrap_or(Value::Null)
}

/// Plays a Deployment controller: writes a status saying the rollout is done.
fn roll_out(env: &Env) {
    let live = env.get("deployment", "web").expect("the deployment exists");
    let mut done = live.clone();
    let generation = live["metadata"]["generation"].clone();
    done["status"] = json!({"observedGeneration": generation, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2, "readyReplicas": 2});
    env.put(&serde_json::to_string(&done).unwrap());
}

#[test]
fn a_deployment_nobody_rolls_out_passes_its_progress_deadline_then_recovers() {
    let env = Env::with_options("1h", "      progressDeadline: 2s\n");
    env.repo.write("app/web.yaml", deployment(2));
    env.repo.commit("a deployment");
    let _agent = env.agent();
    env.wait("applied", Duration::from_secs(30), || {
        env.get("deployment", "web").is_some()
    });
    // No controller has observed it: Progressing, within the deadline at first.
    let st = env.status();
    assert_eq!(st["health"], "Progressing");
    assert!(st["progressingSince"].is_string(), "{st}");
    let web = st["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "web")
        .unwrap()
        .clone();
    assert_eq!(web["health"], "Progressing");
    assert!(
        web["healthMessage"]
            .as_str()
            .unwrap()
            .contains("observed deployment generation"),
        "{web}"
    );
    // Past the deadline, without any new event: the loop wakes for it.
    env.wait("ProgressDeadlineExceeded", Duration::from_secs(15), || {
        condition(&env, "Progressing")["reason"] == "ProgressDeadlineExceeded"
    });
    let p = condition(&env, "Progressing");
    assert_eq!(p["status"], "False");
    assert!(
        p["message"]
            .as_str()
            .unwrap()
            .contains("Deployment.apps default/web"),
        "{p}"
    );
    assert_eq!(
        condition(&env, "Ready")["reason"],
        "ProgressDeadlineExceeded"
    );
    let healthy = condition(&env, "Healthy");
    assert_eq!(
        (healthy["status"].as_str(), healthy["reason"].as_str()),
        (Some("False"), Some("Progressing"))
    );
    // A controller finishes the rollout: healthy, converged, deadline cleared.
    roll_out(&env);
    env.wait("recovery", Duration::from_secs(15), || {
        env.status()["health"] == "Healthy"
    });
    let st = env.status();
    assert_eq!(st["progressingSince"], Value::Null);
    assert_eq!(condition(&env, "Progressing")["reason"], "Converged");
    assert_eq!(condition(&env, "Ready")["status"], "True");
    assert_eq!(condition(&env, "Healthy")["status"], "True");
}

#[test]
fn the_gaps_age_turns_stale_past_its_threshold_and_clears_when_synced() {
    let env = Env::with_options("1h", "      selfHeal: false\n      staleAfter: 2s\n");
    let _agent = env.agent();
    env.wait("first sync", Duration::from_secs(30), || {
        env.status()["sync"] == "Synced"
    });
    assert_eq!(condition(&env, "Stale")["status"], "False");
    env.put(&configmap("a", &[("k", "by hand")]));
    env.wait("out of sync", Duration::from_secs(10), || {
        env.status()["sync"] == "OutOfSync"
    });
    let since = env.status()["outOfSyncSince"].as_str().unwrap().to_string();
    env.wait("stale", Duration::from_secs(15), || {
        condition(&env, "Stale")["status"] == "True"
    });
    let stale = condition(&env, "Stale");
    assert_eq!(stale["reason"], "GapExceededThreshold");
    assert!(
        stale["message"].as_str().unwrap().contains("staleAfter 2s"),
        "{stale}"
    );
    assert_eq!(
        env.status()["outOfSyncSince"],
        since,
        "the gap keeps its start"
    );
    assert_eq!(
        env.get("configmap", "a").unwrap()["data"]["k"],
        "by hand",
        "detect-only: never reverted"
    );
    // Someone puts it back: synced, the gap closes.
    env.put(&configmap("a", &[("k", "1")]));
    env.wait("synced again", Duration::from_secs(10), || {
        env.status()["sync"] == "Synced"
    });
    assert_eq!(env.status()["outOfSyncSince"], Value::Null);
    assert_eq!(condition(&env, "Stale")["status"], "False");
}

#[test]
fn a_writer_that_keeps_changing_a_field_back_is_held_off_and_named() {
    let env = Env::new();
    let agent = env.agent();
    env.wait("first sync", Duration::from_secs(30), || {
        env.get("configmap", "a").is_some()
    });
    // Another writer sets the field back every 100 ms, at least 40 times and for at least 3 s
    // (each write is a `driftless store put` process: on a loaded machine they come slower, and
    // a count, not a duration, keeps the ratio below meaningful).
    let start = Instant::now();
    let mut writes = 0;
    // Once the fight is on, the gap keeps one start however often a revert briefly closes it.
    // It goes on for 10 s after the fight is named: over the first hold (2 s), its revert, and
    // into the second hold (6 s).
    let mut gap_starts = std::collections::BTreeSet::new();
    let mut contested_at: Option<Instant> = None;
    while writes < 40
        || start.elapsed() < Duration::from_secs(3)
        || contested_at.is_none_or(|t| t.elapsed() < Duration::from_secs(10))
    {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no fight after 2 min"
        );
        env.put(&configmap("a", &[("k", "theirs")]));
        writes += 1;
        std::thread::sleep(Duration::from_millis(100));
        if writes % 3 == 0 {
            let st = env.status();
            let contested = st["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Contested" && c["status"] == "True")
            });
            if contested {
                contested_at.get_or_insert_with(Instant::now);
                if let Some(since) = st["outOfSyncSince"].as_str() {
                    gap_starts.insert(since.to_string());
                }
            }
        }
    }
    assert!(
        gap_starts.len() <= 1,
        "the gap restarted during the fight: {gap_starts:?}"
    );
    let contested = condition(&env, "Contested");
    assert_eq!(contested["status"], "True", "{contested}");
    assert_eq!(contested["reason"], "AnotherWriter");
    let message = contested["message"].as_str().unwrap();
    assert!(
        message.contains("ConfigMap default/a") && message.contains("data.k"),
        "{message}"
    );
    // The writer stopped: the agent still gets its way once the hold ends, and keeps going.
    env.wait("the final revert", Duration::from_secs(30), || {
        env.get("configmap", "a")
            .is_some_and(|a| a["data"]["k"] == "1")
    });
    let (_, log) = agent.stop();
    let reverts = log.matches("Drift reverted").count();
    assert!(reverts >= 3, "{reverts} reverts");
    assert!(
        reverts * 3 < writes,
        "{reverts} reverts for {writes} writes: the agent backed off"
    );
    assert!(
        log.contains("Another writer keeps changing it back"),
        "{log}"
    );
}

#[test]
fn periodic_syncs_respect_a_fights_hold() {
    // A one-second poll: without the hold, every poll would revert the fought-over field.
    let env = Env::with_options("1s", "");
    let agent = env.agent();
    env.wait("first sync", Duration::from_secs(30), || {
        env.get("configmap", "a").is_some()
    });
    // Keep changing it back until the agent holds off, then 4 s more: over the first hold
    // (2 s) and into the second (6 s), with a poll every second.
    let start = Instant::now();
    let mut held_at: Option<Instant> = None;
    while held_at.is_none_or(|t| t.elapsed() < Duration::from_secs(4)) {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no hold after 2 min of fighting:\n{}",
            env.log()
        );
        env.put(&configmap("a", &[("k", "theirs")]));
        std::thread::sleep(Duration::from_millis(100));
        if held_at.is_none() && env.log().contains("holding the next revert") {
            held_at = Some(Instant::now());
        }
    }
    let (_, log) = agent.stop();
    // A poll after a hold ended may revert (the hold is over); none may while it lasts. The
    // hold starts at its log line and lasts the `hold=` it names; the 300 ms spare covers the
    // time between starting the hold and logging it.
    let at = |line: &str| {
        humantime::parse_rfc3339(line.split_whitespace().next().unwrap())
            .unwrap_or_else(|e| panic!("{e}: {line}"))
    };
    let holds: Vec<(std::time::SystemTime, Duration)> = log
        .lines()
        .filter(|l| l.contains("holding the next revert"))
        .map(|l| {
            let hold = l
                .split("hold=")
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap();
            (at(l), humantime::parse_duration(hold).unwrap())
        })
        .collect();
    let periodic_reverts: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains("Drift reverted") || (l.contains("Applied") && l.contains("updated=1"))
        })
        .filter(|l| {
            let t = at(l);
            holds
                .iter()
                .any(|(h, d)| t > *h && t + Duration::from_millis(300) < *h + *d)
        })
        .collect();
    assert!(
        periodic_reverts.is_empty(),
        "polls reverted a held object: {periodic_reverts:?}\n{log}"
    );
    assert!(log.contains("holding the next revert"), "{log}");
    assert!(log.matches("Drift reverted").count() >= 3, "{log}");
}

/// A deny window active now (in UTC) that ends at the next full hour.
fn deny_this_hour(manual: bool) -> (String, String) {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let hour: u32 = now[11..13].parse().unwrap();
    let next = format!("T{:02}:00:00Z", (hour + 1) % 24);
    (
        format!(
            "      windows:\n      - {{kind: deny, schedule: \"0 {hour} * * *\", duration: 1h, timeZone: UTC, manualSync: {manual}}}\n"
        ),
        next,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_window_holds_applies_and_reverts_and_manual_sync_passes_it() {
    let env = Env::new();
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    let (window, resumes) = deny_this_hour(true);
    env.app_config(&window);
    env.server_config("server:\n  listen: \"127.0.0.1:0\"\n  token: {env: DRIFTLESS_TEST_TOKEN}\n");
    let _agent = env.agent_with_env(&[("DRIFTLESS_TEST_TOKEN", "t")]);
    let base = format!("http://{}", env.http_addr());
    env.wait("the window in the status", Duration::from_secs(30), || {
        condition(&env, "SyncWindow")["reason"] == "DenyWindowActive"
    });
    let w = condition(&env, "SyncWindow");
    assert_eq!(w["status"], "False");
    let message = w["message"].as_str().unwrap();
    assert!(
        message.contains("deny window `0 ")
            && message.contains("until")
            && message.contains(&resumes),
        "{message}"
    );
    // Drift is detected, not reverted.
    env.put(&configmap("a", &[("k", "during the window")]));
    env.wait("drift reported", Duration::from_secs(10), || {
        env.status()["sync"] == "OutOfSync"
    });
    assert_eq!(condition(&env, "Ready")["reason"], "HeldBySyncWindow");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        env.get("configmap", "a").unwrap()["data"]["k"],
        "during the window"
    );
    // A new commit is not applied automatically (poll by hand with a webhook-free fetch: the
    // status keeps the old revision and names the new one as attempted).
    let before = env.status()["revision"].clone();
    env.repo.write("app/b.yaml", configmap("b", &[("k", "2")]));
    let head = env.repo.commit("during the window");
    // A person's sync passes the window (manualSync: true).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let r = reqwest::Client::new()
        .post(format!("{base}/api/v1/apps/demo/sync"))
        .bearer_auth("t")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    env.wait("the manual sync", Duration::from_secs(30), || {
        env.status()["revision"] == head
    });
    assert_ne!(before, head);
    assert_eq!(
        env.get("configmap", "a").unwrap()["data"]["k"],
        "1",
        "the manual sync reverted the drift too"
    );
    assert_eq!(env.get("configmap", "b").unwrap()["data"]["k"], "2");
}

#[test]
fn time_held_by_a_sync_window_does_not_count_toward_the_progress_deadline() {
    let env = Env::with_options("1s", "      progressDeadline: 2s\n");
    let (window, _) = deny_this_hour(false);
    env.app_config(&window);
    let _agent = env.agent();
    env.wait("held by the window", Duration::from_secs(30), || {
        condition(&env, "Ready")["reason"] == "HeldBySyncWindow"
    });
    // Well past the deadline, still held: the deadline has not started.
    std::thread::sleep(Duration::from_secs(4));
    let st = env.status();
    let progressing = condition(&env, "Progressing");
    assert_eq!(progressing["reason"], "HeldBySyncWindow", "{st}");
    assert_eq!(
        condition(&env, "Ready")["reason"],
        "HeldBySyncWindow",
        "{st}"
    );
    assert!(st["progressingSince"].is_null(), "{st}");
    let log = env.log();
    assert!(!log.contains("ProgressDeadlineExceeded"), "{log}");
    // Held by a window the user set is information, not a warning.
    let held: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("Condition changed") && l.contains("reason=HeldBySyncWindow"))
        .collect();
    assert!(!held.is_empty(), "{log}");
    assert!(held.iter().all(|l| l.contains("INFO")), "{held:?}");
    // The first revision held back is not drift: said once, as a revision not applied.
    assert!(!log.contains("Drift detected"), "{log}");
    assert_eq!(log.matches("Revision not applied yet").count(), 1, "{log}");
}

#[test]
fn the_agent_adopts_what_a_sync_command_beside_it_applied() {
    let env = Env::with_options("1s", "");
    let (window, _) = deny_this_hour(true);
    env.app_config(&window);
    let _agent = env.agent();
    env.wait("held by the window", Duration::from_secs(30), || {
        condition(&env, "Ready")["reason"] == "HeldBySyncWindow"
    });
    assert!(env.status()["revision"].is_null(), "nothing applied yet");
    // A person syncs by hand; the window allows manual syncs.
    let out = env.run(&["sync"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let head = env.repo.head();
    env.wait("the agent agrees", Duration::from_secs(30), || {
        let st = env.status();
        st["revision"] == head && st["sync"] == "Synced"
    });
    // And keeps agreeing over its next polls.
    std::thread::sleep(Duration::from_millis(2500));
    let st = env.status();
    assert_eq!(st["revision"], head, "{st}");
    assert_eq!(st["sync"], "Synced", "{st}");
    assert!(env.log().contains("Inventory written by another process"));
}

#[test]
fn without_manual_sync_a_deny_window_holds_even_manual_syncs_and_new_commits() {
    let env = Env::with_options("1s", "");
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    let applied = env.repo.head();
    let (window, _) = deny_this_hour(false);
    env.app_config(&window);
    let _agent = env.agent();
    env.repo
        .write("app/a.yaml", configmap("a", &[("k", "new")]));
    let head = env.repo.commit("held");
    env.wait("the new commit is seen", Duration::from_secs(30), || {
        env.status()["lastAttemptedRevision"] == head
    });
    let st = env.status();
    assert_eq!(st["revision"], applied, "not applied");
    assert_eq!(st["sync"], "OutOfSync");
    assert_eq!(env.get("configmap", "a").unwrap()["data"]["k"], "1");
    // `driftless sync` by hand is a manual sync: held too, since the window does not allow it.
    let out = env.run(&["sync"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains(
            "1 to update, 0 to delete, 1 unchanged (held by a sync window: planned, not written)"
        ),
        "{}",
        stdout(&out)
    );
    assert_eq!(env.get("configmap", "a").unwrap()["data"]["k"], "1");
}

#[test]
fn wait_exits_0_when_the_conditions_hold_and_1_at_the_timeout() {
    let env = Env::new();
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    let head = env.repo.head();
    let ok = env.run(&[
        "wait",
        "--app",
        "demo",
        "--for",
        "synced,healthy",
        "--timeout",
        "10s",
        "--revision",
        &head[..10],
    ]);
    assert_eq!(ok.status.code(), Some(0), "{}", stdout(&ok));
    assert!(
        stdout(&ok).contains("demo is Synced and Healthy"),
        "{}",
        stdout(&ok)
    );
    // A deployment nobody rolls out never gets healthy.
    env.repo.write("app/web.yaml", deployment(1));
    env.repo.commit("deployment");
    assert_eq!(
        env.run(&["sync"]).status.code(),
        Some(0),
        "synced, though not healthy"
    );
    let started = Instant::now();
    let late = env.run(&["wait", "--app", "demo", "--timeout", "2s"]);
    assert_eq!(late.status.code(), Some(1));
    assert!(started.elapsed() >= Duration::from_secs(2));
    let text = stdout(&late);
    assert!(
        text.starts_with("timed out after 2s: demo is Synced and Progressing"),
        "{text}"
    );
    assert!(text.contains("Deployment.apps default/web"), "{text}");
    // It says which of synced and healthy is missing, and why.
    assert!(text.contains("; not healthy (Progressing: "), "{text}");
    assert!(!text.contains("not synced"), "{text}");
    // `--for synced` alone holds already.
    assert_eq!(
        env.run(&[
            "wait",
            "--app",
            "demo",
            "--for",
            "synced",
            "--timeout",
            "5s"
        ])
        .status
        .code(),
        Some(0)
    );
    assert_eq!(
        env.run(&["wait", "--app", "demo", "--for", "pretty"])
            .status
            .code(),
        Some(2)
    );
    let unknown = env.run(&["wait", "--app", "nope", "--timeout", "10m"]);
    assert_eq!(
        unknown.status.code(),
        Some(2),
        "an unknown app fails at once"
    );
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no app named `nope`"));
    // A name is resolved in the app's repository: `main` is the head commit.
    let at_main = env.run(&[
        "wait",
        "--app",
        "demo",
        "--for",
        "synced",
        "--timeout",
        "5s",
        "--revision",
        "main",
    ]);
    assert_eq!(at_main.status.code(), Some(0), "{}", stdout(&at_main));
    assert!(
        stderr(&at_main).contains(&format!("main is {}", env.repo.head())),
        "{}",
        stderr(&at_main)
    );
    // A whole commit id the repository does not have fails at once.
    let missing = env.run(&[
        "wait",
        "--app",
        "demo",
        "--timeout",
        "1m",
        "--revision",
        &"d".repeat(40),
    ]);
    assert_eq!(missing.status.code(), Some(2), "{}", stdout(&missing));
    assert!(
        stderr(&missing).contains("not found"),
        "{}",
        stderr(&missing)
    );
    // A revision refused as it stands (it does not parse) fails at once, not at the timeout.
    env.repo.write(
        "app/bad.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, name: y}\n",
    );
    let bad = env.repo.commit("bad");
    assert_eq!(env.run(&["sync"]).status.code(), Some(1));
    let started = Instant::now();
    let refused = env.run(&[
        "wait",
        "--app",
        "demo",
        "--timeout",
        "1m",
        "--revision",
        &bad,
    ]);
    assert_eq!(refused.status.code(), Some(1), "{}", stdout(&refused));
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        stdout(&refused).contains("will not be applied (InvalidManifest: "),
        "{}",
        stdout(&refused)
    );
}

#[test]
fn the_health_command_applies_the_configs_cel_rules() {
    let env = Env::new();
    let config = std::fs::read_to_string(env.config()).unwrap();
    std::fs::write(
        env.config(),
        format!("health:\n- group: example.com\n  kind: Widget\n  healthy: \"status.phase == 'Running'\"\n  degraded: \"has(status.error)\"\n{config}"),
    )
    .unwrap();
    let f = env.dir.path().join("widgets.yaml");
    std::fs::write(
        &f,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: up, namespace: d}\nstatus: {phase: Running}\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: broken, namespace: d}\nstatus: {phase: Running, error: boom}\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: starting, namespace: d}\nstatus: {phase: Starting, conditions: [{type: Ready, status: \"False\", message: warming up}]}\n",
    )
    .unwrap();
    let out = env.run(&["health", "-f", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out),
        "Widget.example.com d/up: Healthy: custom rule: status.phase == 'Running'\nWidget.example.com d/broken: Degraded: custom rule: has(status.error)\nWidget.example.com d/starting: Progressing: Ready=False: warming up\n"
    );
    let json_out = env.run(&["health", "-f", f.to_str().unwrap(), "-o", "json"]);
    let v: Value = serde_json::from_slice(&json_out.stdout).unwrap();
    assert_eq!(v["objects"][1]["health"], "Degraded");
    assert_eq!(v["objects"][1]["name"], "broken");
}

#[test]
fn offline_diff_gives_every_conformance_verdict_and_the_label_changes() {
    let dir = common::data_dir().join("conformance/gitops-engine/diff");
    let run = |desired: &std::path::Path, live: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_driftless"))
            .args(["diff", "--desired"])
            .arg(desired)
            .arg("--live")
            .arg(live)
            .output()
            .unwrap()
    };
    let expected = std::fs::read_to_string(dir.join("expected.tsv")).unwrap();
    for line in expected.lines().skip(1) {
        let (pair, _) = line.split_once('\t').unwrap();
        if pair.contains(' ') {
            continue;
        }
        let out = run(
            &dir.join(format!("{pair}-config.json")),
            &dir.join(format!("{pair}-live.json")),
        );
        // Every plain pair is "no drift" (aggr-clusterrole: aggregated rules are ignored).
        assert_eq!(out.status.code(), Some(0), "{pair}: {}", stdout(&out));
    }
    // The labelled variant: one added, one removed, one changed label.
    let mut changed: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("elasticsearch-config.json")).unwrap(),
    )
    .unwrap();
    let labels = changed["metadata"]["labels"].as_object_mut().unwrap();
    labels.insert("foo".into(), "bar".into());
    labels.insert("chart".into(), "elasticsearch-1.7.1".into());
    labels.remove("release");
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("changed.json");
    std::fs::write(&f, serde_json::to_string(&changed).unwrap()).unwrap();
    let out = run(&f, &dir.join("elasticsearch-live.json"));
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.contains("metadata.labels.chart: \"elasticsearch-1.7.0\" -> \"elasticsearch-1.7.1\""),
        "{text}"
    );
    assert!(
        text.contains("metadata.labels.foo: (absent) -> \"bar\""),
        "{text}"
    );
    assert!(
        text.contains("metadata.labels.release: \"elasticsearch4\" -> (absent)"),
        "{text}"
    );
    // Two different objects, or a broken file: 2.
    let other = run(
        &dir.join("deployment-config.json"),
        &dir.join("elasticsearch-live.json"),
    );
    assert_eq!(other.status.code(), Some(2));
    std::fs::write(tmp.path().join("bad.json"), "{").unwrap();
    assert_eq!(
        run(
            &tmp.path().join("bad.json"),
            &dir.join("elasticsearch-live.json")
        )
        .status
        .code(),
        Some(2)
    );
    // Sets: matched by key; a declared object missing from the live file is drift, a live
    // object nobody declares is only named.
    std::fs::write(
        tmp.path().join("desired.yaml"),
        format!(
            "{}---\n{}---\n{}",
            configmap("same", &[("k", "1")]),
            configmap("changed", &[("k", "new")]),
            configmap("missing", &[("k", "1")])
        ),
    )
    .unwrap();
    let live_cm = |name: &str, v: &str| {
        configmap(name, &[("k", v)]).replace("metadata:\n", "metadata:\n  namespace: prod\n")
    };
    std::fs::write(
        tmp.path().join("live.yaml"),
        format!(
            "{}---\n{}---\n{}",
            live_cm("same", "1"),
            live_cm("changed", "old"),
            live_cm("extra", "1")
        ),
    )
    .unwrap();
    let sets = run(
        &tmp.path().join("desired.yaml"),
        &tmp.path().join("live.yaml"),
    );
    assert_eq!(sets.status.code(), Some(1), "{}", stdout(&sets));
    let text = stdout(&sets);
    assert!(text.contains("no drift: ConfigMap prod/same"), "{text}");
    assert!(text.contains("data.k: \"old\" -> \"new\""), "{text}");
    assert!(
        text.contains("missing from the live objects: ConfigMap default/missing"),
        "{text}"
    );
    assert!(
        text.contains("not declared (offline there is no inventory"),
        "{text}"
    );
    assert!(text.contains("ConfigMap prod/extra"), "{text}");
}

#[test]
fn a_newer_commit_applied_by_a_sync_command_is_not_undone_by_the_running_agent() {
    // The agent polls hourly: what it does next comes from the inventory change alone.
    let env = Env::new();
    let _agent = env.agent();
    env.wait("the first commit applied", Duration::from_secs(30), || {
        env.status()["sync"] == "Synced"
    });
    env.repo.write("app/a.yaml", configmap("a", &[("k", "2")]));
    env.repo.commit("second");
    let out = env.run(&["sync"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.wait("the agent adopts the sync", Duration::from_secs(30), || {
        env.log().contains("Inventory written by another process")
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        env.get("configmap", "a").unwrap()["data"]["k"],
        "2",
        "the agent put back its older commit:\n{}",
        env.log()
    );
    assert_eq!(env.status()["revision"], env.repo.head());
}

/// Another writer hammering objects from its own process: `count` writes spread over `names`,
/// as fast as SQLite takes them, until `stop`. Returns how many it made.
fn hammer(
    store: std::path::PathBuf,
    names: Vec<String>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        use driftless::store::{Precondition, Store, Write};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let s =
                driftless::store::sqlite::SqliteStore::open(&store, Default::default()).unwrap();
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let name = &names[n as usize % names.len()];
                let v: Value = serde_json::json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": "default"},
                    "data": {"k": format!("theirs-{n}")},
                });
                s.commit(vec![Write::Put {
                    object: driftless::object::Object::from_value(v).unwrap(),
                    precondition: Precondition::Any,
                    json: None,
                }])
                .await
                .unwrap();
                n += 1;
                // About 1,000 writes a second at most.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            n
        })
    })
}

#[test]
fn under_heavy_out_of_band_writes_reverts_are_throttled_and_new_commits_still_apply() {
    // 300 objects polled every 2 s; another writer keeps changing 20 of them.
    let env = Env::with_options("2s", "");
    for i in 0..300 {
        env.repo.write(
            &format!("app/o{i}.yaml"),
            configmap(&format!("o{i}"), &[("k", "git")]),
        );
    }
    env.repo.commit("300 objects");
    let agent = env.agent();
    env.wait("first sync", Duration::from_secs(60), || {
        env.status()["sync"] == "Synced"
    });
    let hammered: Vec<String> = (0..20).map(|i| format!("o{i}")).collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = hammer(
        env.dir.path().join("store.db"),
        hammered.clone(),
        stop.clone(),
    );
    // The agent reverts them until it sees a fight, says so, and reports the objects as
    // differing from Git (not Synced) while it holds off.
    env.wait("a fight named under load", Duration::from_secs(60), || {
        condition(&env, "Contested")["status"] == "True"
    });
    env.wait(
        "the fought objects reported out of sync",
        Duration::from_secs(30),
        || {
            let st = env.status();
            st["sync"] == "OutOfSync"
                && st["resources"].as_array().unwrap().iter().any(|r| {
                    hammered.iter().any(|h| r["name"] == h.as_str())
                        && r["sync"] == "OutOfSync"
                        && r["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("not reverted"))
                })
        },
    );
    // A commit pushed during the load is fetched and applied at the next polls.
    env.repo
        .write("app/fresh.yaml", configmap("fresh", &[("k", "new")]));
    env.repo.commit("a new object during the load");
    let took = env.wait(
        "the new commit applied under load",
        Duration::from_secs(40),
        || env.get("configmap", "fresh").is_some(),
    );
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let writes = writer.join().unwrap();
    eprintln!("{writes} out-of-band writes; the new commit took {took:?}");
    // Untouched objects were never reported out of sync for long, and once the writer stops,
    // every held object is reverted when its hold ends.
    env.wait("every object back to Git", Duration::from_secs(120), || {
        hammered.iter().all(|h| {
            env.get("configmap", h)
                .is_some_and(|o| o["data"]["k"] == "git")
        })
    });
    env.wait("synced", Duration::from_secs(30), || {
        env.status()["sync"] == "Synced"
    });
    let (_, log) = agent.stop();
    let reverts = log.matches("Drift reverted").count() as u64;
    assert!(reverts >= 20, "{reverts} reverts\n{log}");
    assert!(
        reverts * 5 < writes,
        "{reverts} reverts for {writes} writes: reverts were not throttled"
    );
    assert!(!log.contains("Sync failed"), "{log}");
}

#[test]
fn past_its_deadline_an_out_of_sync_app_is_ready_false_with_the_deadline_not_out_of_sync() {
    let env = Env::with_options("1h", "      selfHeal: false\n      progressDeadline: 2s\n");
    let agent = env.agent();
    env.wait("first sync", Duration::from_secs(30), || {
        env.status()["sync"] == "Synced"
    });
    env.put(&configmap("a", &[("k", "by hand")]));
    env.wait("out of sync", Duration::from_secs(30), || {
        condition(&env, "Ready")["reason"] == "OutOfSync"
    });
    // The deadline passes while the drift stays (detect-only): the worse reason shows.
    env.wait("the deadline reason", Duration::from_secs(30), || {
        condition(&env, "Ready")["reason"] == "ProgressDeadlineExceeded"
    });
    let ready = condition(&env, "Ready");
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .contains("1 object(s) differ from Git"),
        "{ready}"
    );
    let (_, log) = agent.stop();
    assert!(log.contains("reason=ProgressDeadlineExceeded"), "{log}");
}
