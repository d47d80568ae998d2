//! The pieces of a Kubernetes test fit: a `kube-apiserver` built from source and etcd 3.6 start
//! on loopback with RBAC on, and kube-rs over rustls applies a ConfigMap with server-side apply
//! as an admin authenticated by a client certificate, then reads it back.
#![cfg(feature = "kubernetes")]

mod common;

use common::kube::ControlPlane;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;

#[tokio::test]
async fn a_configmap_applied_server_side_through_kube_reads_back_with_its_field_manager() {
    let cp = ControlPlane::start().await;
    let client = cp.client().await;
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "37"),
        "the pinned release answers: {version:?}"
    );

    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let declared = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "proof", "labels": {"driftless.io/app": "proof"}},
        "data": {"greeting": "hello", "replicas": "3"},
    });
    let params = PatchParams::apply("driftless").force();
    let applied = api
        .patch("proof", &params, &Patch::Apply(&declared))
        .await
        .unwrap_or_else(|e| panic!("server-side apply: {e}\n{}", cp.log()));
    let rv = applied.metadata.resource_version.clone().unwrap();

    let live = api.get("proof").await.unwrap();
    let data = live.data.clone().unwrap();
    assert_eq!(data["greeting"], "hello");
    assert_eq!(data["replicas"], "3");
    assert_eq!(
        live.metadata.labels.as_ref().unwrap()["driftless.io/app"],
        "proof"
    );
    let managers: Vec<(String, String)> = live
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(managers, [("driftless".to_string(), "Apply".to_string())]);

    // Applying the same declaration again changes nothing: no new resourceVersion.
    let again = api
        .patch("proof", &params, &Patch::Apply(&declared))
        .await
        .unwrap();
    assert_eq!(again.metadata.resource_version.unwrap(), rv);

    // RBAC is on: a user outside system:masters with no role binding is refused.
    let forbidden = client
        .request_text(
            http::Request::get("/api/v1/namespaces/default/configmaps/proof")
                .header("Impersonate-User", "nobody")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .expect_err("an unbound user is refused");
    assert!(
        matches!(&forbidden, kube::Error::Api(s) if s.code == 403),
        "{forbidden:?}"
    );
}

/// The agent on a real API server: guestbook (three Deployments, three Services) and a
/// ConfigMap from Git are applied by server-side apply with the app's label; passes after that
/// write nothing; a change by another field manager is reverted; a deleted object is recreated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_applies_to_a_real_api_server_and_reverts_drift_from_its_watches() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Service;

    let cp = ControlPlane::start().await;
    let client = cp.client().await;
    let repo = common::GitRepo::new();
    let guestbook = common::data_dir().join("../../examples/guestbook");
    for entry in std::fs::read_dir(&guestbook).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            repo.write(&format!("app/{name}"), std::fs::read(&path).unwrap());
        }
    }
    repo.write(
        "app/settings.yaml",
        common::configmap("settings", &[("mode", "blue")]),
    );
    repo.commit("guestbook");
    let agent = Agent::start(&cp, &repo, "1s");
    let log = || agent.log();
    {
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
        let services: Api<Service> = Api::namespaced(client.clone(), "default");
        let wait = |secs: u64| tokio::time::Instant::now() + Duration::from_secs(secs);
        let passes = || agent.passes();
        let deadline = wait(60);
        loop {
            if let (Ok(Some(_)), Ok(Some(_))) = (
                configmaps.get_opt("settings").await,
                deployments.get_opt("redis-replica").await,
            ) && services.get_opt("frontend").await.unwrap().is_some()
                && passes().await > 0
            {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "guestbook not applied within 60 s:\n{}",
                log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let settings = configmaps.get("settings").await.unwrap();
        assert_eq!(
            settings.metadata.labels.as_ref().unwrap()["driftless.io/app"],
            "guestbook"
        );
        let managers: Vec<String> = settings
            .metadata
            .managed_fields
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|m| {
                format!(
                    "{}/{}",
                    m.manager.unwrap_or_default(),
                    m.operation.unwrap_or_default()
                )
            })
            .collect();
        assert_eq!(managers, ["driftless/Apply"]);
        // Only the declared fields are driftless's: a defaulted one is not.
        let frontend = deployments.get("frontend").await.unwrap();
        let owned =
            serde_json::to_string(&frontend.metadata.managed_fields.as_ref().unwrap()[0].fields_v1)
                .unwrap();
        assert!(
            owned.contains("f:replicas") && !owned.contains("f:revisionHistoryLimit"),
            "{owned}"
        );

        // Passes after that write nothing (a positive control: the passes ran).
        let versions = || async {
            vec![
                configmaps
                    .get("settings")
                    .await
                    .unwrap()
                    .metadata
                    .resource_version,
                deployments
                    .get("frontend")
                    .await
                    .unwrap()
                    .metadata
                    .resource_version,
                services
                    .get("frontend")
                    .await
                    .unwrap()
                    .metadata
                    .resource_version,
            ]
        };
        let before = versions().await;
        let passes_before = passes().await;
        tokio::time::sleep(Duration::from_secs(4)).await;
        let after = versions().await;
        let passes_after = passes().await;
        assert!(
            passes_after >= passes_before + 2,
            "the passes ran: {passes_before} then {passes_after}\n{}",
            log()
        );
        assert_eq!(before, after, "passes wrote nothing:\n{}", log());

        // A change by another field manager is drift: reverted.
        let edit = PatchParams {
            field_manager: Some("kubectl-edit".into()),
            ..PatchParams::default()
        };
        configmaps
            .patch(
                "settings",
                &edit,
                &Patch::Merge(
                    json!({"data": {"mode": "red"}, "metadata": {"labels": {"team": "web"}}}),
                ),
            )
            .await
            .unwrap();
        let deadline = wait(20);
        loop {
            let live = configmaps.get("settings").await.unwrap();
            if live.data.as_ref().unwrap()["mode"] == "blue" {
                // The label another manager added is not Git's: kept.
                assert_eq!(live.metadata.labels.as_ref().unwrap()["team"], "web");
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "drift not reverted within 20 s:\n{}",
                log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Who drifted: the revert names the manager from managedFields, in the log and in the
        // object's status.
        agent
            .wait("the revert named who", 10, || async {
                agent.log().contains("changed_by=kubectl-edit at ")
            })
            .await;
        let resources = agent.status().await["resources"].clone();
        let settings = resources
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "settings")
            .unwrap();
        assert!(
            settings["message"].as_str().is_some_and(|m| m
                .starts_with("applied over changes by kubectl-edit at ")
                && m.ends_with(": data.mode")),
            "{settings}"
        );
        // And in the drift metric's `manager` label.
        let metrics = reqwest::get(format!("http://127.0.0.1:{}/metrics", agent.port))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            metrics.lines().any(|l| l.starts_with(
                "driftless_drift_reverted_total{app=\"guestbook\",manager=\"kubectl-edit\"} "
            ) && !l.ends_with(" 0")),
            "{metrics}"
        );

        // The store commands read the cluster: kinds by kubectl's names, through discovery.
        let cli = |args: &[&str]| agent.cli(args);
        let (code, out, err) = cli(&["store", "list", "deploy"]);
        assert_eq!(code, Some(0), "{err}");
        for name in ["frontend", "redis-master", "redis-replica"] {
            assert!(out.contains(name), "{out}");
        }
        let (code, out, err) = cli(&["store", "get", "cm", "settings", "-o", "json"]);
        assert_eq!(code, Some(0), "{err}");
        let got: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(got["data"]["mode"], "blue");
        let (code, _, _) = cli(&["store", "get", "cm", "nothing-here"]);
        assert_eq!(code, Some(1));
        // `store put` writes as field manager driftless-cli: drift, reverted, named.
        let edited = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            edited.path(),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {mode: green}\n",
        )
        .unwrap();
        let (code, _, err) = cli(&["store", "put", "-f", edited.path().to_str().unwrap()]);
        assert_eq!(code, Some(0), "{err}");
        agent
            .wait("the put reverted and named", 20, || async {
                agent.log().contains("changed_by=driftless-cli at ")
                    && configmaps.get("settings").await.unwrap().data.unwrap()["mode"] == "blue"
            })
            .await;
        // `store delete` deletes from the cluster: recreated.
        let before = configmaps.get("settings").await.unwrap().metadata.uid;
        let (code, _, err) = cli(&["store", "delete", "cm", "settings"]);
        assert_eq!(code, Some(0), "{err}");
        agent
            .wait("the deleted ConfigMap recreated", 20, || async {
                configmaps
                    .get_opt("settings")
                    .await
                    .unwrap()
                    .is_some_and(|c| c.metadata.uid != before)
            })
            .await;

        // A deleted object is recreated.
        services
            .delete("redis-master", &Default::default())
            .await
            .unwrap();
        let deadline = wait(20);
        while services.get_opt("redis-master").await.unwrap().is_none() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "deleted Service not recreated within 20 s:\n{}",
                log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A repository whose folder `app` holds one ConfigMap, `settings` (`mode: blue`), committed.
fn settings_repo() -> common::GitRepo {
    let repo = common::GitRepo::new();
    repo.write(
        "app/settings.yaml",
        common::configmap("settings", &[("mode", "blue")]),
    );
    repo.commit("settings");
    repo
}

/// The `mode` of ConfigMap `default/settings` ([`settings_repo`] declares `blue`), if readable.
async fn settings_mode(api: &Api<ConfigMap>) -> Option<String> {
    api.get("settings")
        .await
        .ok()
        .and_then(|c| c.data)
        .and_then(|d| d.get("mode").cloned())
}

/// Sets `default/settings`' mode to `red` as another field manager (`kubectl-edit`) would.
async fn edit_to_red(api: &Api<ConfigMap>) {
    let red = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
        "data": {"mode": "red"}});
    api.patch(
        "settings",
        &PatchParams::apply("kubectl-edit").force(),
        &Patch::Apply(&red),
    )
    .await
    .unwrap();
}

/// `driftless run` against a control plane, with one app `guestbook` on `repo`'s folder `app`,
/// killed on drop.
struct Agent {
    child: std::process::Child,
    port: u16,
    log_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Agent {
    fn start(cp: &ControlPlane, repo: &common::GitRepo, interval: &str) -> Agent {
        Self::start_with(cp, repo, interval, "")
    }

    /// [`Agent::start`] with more lines for the app (indented under it, e.g. `    sync: ...`).
    fn start_with(cp: &ControlPlane, repo: &common::GitRepo, interval: &str, app: &str) -> Agent {
        let store = format!("{{kubeconfig: {}}}", cp.kubeconfig.display());
        Self::start_on(&store, repo, interval, app)
    }

    /// [`Agent::start_with`] on `store.kubernetes: <store>` (a flow mapping).
    fn start_on(store: &str, repo: &common::GitRepo, interval: &str, app: &str) -> Agent {
        Self::start_replica(store, repo, interval, app, "r1")
    }

    /// [`Agent::start_on`] as replica `replica` (`DRIFTLESS_REPLICA`).
    fn start_replica(
        store: &str,
        repo: &common::GitRepo,
        interval: &str,
        app: &str,
        replica: &str,
    ) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let port = common::free_port();
        std::fs::write(
            dir.path().join("driftless.yaml"),
            format!(
                "store:\n  kubernetes: {store}\ncacheDir: cache\nserver: {{listen: \"127.0.0.1:{port}\"}}\napps:\n  - name: guestbook\n    source:\n      repo: {}\n      path: app\n      interval: {interval}\n{app}",
                repo.url()
            ),
        )
        .unwrap();
        let log_path = dir.path().join("agent.log");
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_driftless"))
            .arg("-c")
            .arg(dir.path().join("driftless.yaml"))
            .arg("run")
            .current_dir(dir.path())
            .env(
                "RUST_LOG",
                std::env::var("DRIFTLESS_TEST_LOG").unwrap_or("info,driftless=debug".into()),
            )
            .env("DRIFTLESS_REPLICA", replica)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .unwrap();
        Agent {
            child,
            port,
            log_path,
            _dir: dir,
        }
    }

    /// Waits up to `secs` for the app's status to say `Synced`.
    async fn wait_synced(&self, secs: u64) {
        self.wait("Synced", secs, || async {
            self.status().await["sync"] == "Synced"
        })
        .await;
    }

    /// How many reconciles the agent has run (its metric).
    async fn passes(&self) -> u64 {
        let text = reqwest::get(format!("http://127.0.0.1:{}/metrics", self.port))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .find_map(|l| {
                l.strip_prefix("driftless_reconcile_duration_seconds_count{app=\"guestbook\"} ")
            })
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    fn config(&self) -> PathBuf {
        self._dir.path().join("driftless.yaml")
    }

    /// `driftless -c <this agent's config> ARGS`: exit code, standard output, standard error.
    fn cli(&self, args: &[&str]) -> (Option<i32>, String, String) {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_driftless"))
            .arg("-c")
            .arg(self.config())
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    }

    /// The app's status as `GET /api/v1/apps` gives it (null until the server answers).
    async fn status(&self) -> serde_json::Value {
        let Ok(r) = reqwest::get(format!("http://127.0.0.1:{}/api/v1/apps", self.port)).await
        else {
            return serde_json::Value::Null;
        };
        let v: serde_json::Value = r.json().await.unwrap_or_default();
        v["apps"][0].clone()
    }

    /// Waits up to `secs` for `f`, showing the agent's log if it does not come.
    async fn wait<F: std::future::Future<Output = bool>>(
        &self,
        what: &str,
        secs: u64,
        mut f: impl FnMut() -> F,
    ) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        while !f().await {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: not within {secs} s (the agent {}):\n{}",
                match std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())) {
                    Ok(stat) if !stat.contains(") Z ") => "is running",
                    _ => "has exited",
                },
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {type: integer, minimum: 1}
";

/// One commit holds a Namespace and objects in it, and a CRD and a custom resource of it: the
/// Namespace and the CRD go first (the CRD until `Established`), then the rest, in one sync.
/// A drift then comes back through the watches alone (the poll interval is an hour).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_a_crd_and_what_they_hold_apply_in_one_commit_and_drift_is_reverted_from_the_watch()
 {
    let cp = ControlPlane::start().await;
    let client = cp.client().await;
    let repo = common::GitRepo::new();
    repo.write(
        "app/shop.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: prices\n  namespace: shop\ndata:\n  apple: \"3\"\n",
    );
    repo.write("app/crd.yaml", CRD);
    repo.write(
        "app/widget.yaml",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: gear\n  namespace: shop\nspec:\n  size: 3\n",
    );
    repo.commit("shop");
    let agent = Agent::start(&cp, &repo, "1h");
    let widgets: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "shop",
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "example.com",
            "v1",
            "Widget",
        )),
    );
    let prices: Api<ConfigMap> = Api::namespaced(client.clone(), "shop");
    agent
        .wait("the widget applied", 90, || async {
            matches!(widgets.get_opt("gear").await, Ok(Some(_)))
        })
        .await;
    agent.wait_synced(30).await;
    assert_eq!(
        prices.get("prices").await.unwrap().data.unwrap()["apple"],
        "3"
    );

    // Drift by another manager on the custom resource and on the ConfigMap: reverted through
    // the watches (the next poll is an hour away).
    let edit = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    };
    widgets
        .patch("gear", &edit, &Patch::Merge(json!({"spec": {"size": 9}})))
        .await
        .unwrap();
    prices
        .patch(
            "prices",
            &edit,
            &Patch::Merge(json!({"data": {"apple": "1"}})),
        )
        .await
        .unwrap();
    agent
        .wait("the widget reverted", 20, || async {
            widgets.get("gear").await.unwrap().data["spec"]["size"] == 3
        })
        .await;
    agent
        .wait("the ConfigMap reverted", 20, || async {
            prices.get("prices").await.unwrap().data.unwrap()["apple"] == "3"
        })
        .await;
    // The agent's writer batches per-object status messages: the record it stores says both
    // reverts before another process writes the app's status below, which a later batch would
    // overwrite (two processes writing one app's status: the last write wins).
    agent
        .wait(
            "the agent's status record with both reverts",
            30,
            || async {
                let (_, out, _) = agent.cli(&["status", "-o", "json"]);
                out.matches("applied over changes by kubectl-edit").count() >= 2
            },
        )
        .await;

    // A revision the API server refuses (the widget's size below the CRD's minimum) applies
    // nothing, not even its valid new ConfigMap; the refusal names file, line and the server's
    // message; the revision in force is still enforced.
    repo.write(
        "app/widget.yaml",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: gear\n  namespace: shop\nspec:\n  size: 0\n",
    );
    repo.write(
        "app/extra.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n  namespace: shop\n",
    );
    let bad = repo.commit("size 0");
    // The agent polls hourly: a `driftless sync` beside it tries the new revision.
    let (_, out, err) = agent.cli(&["sync", "--app", "guestbook"]);
    let said = out + &err;
    assert!(
        said.contains("RejectedByTarget: refused by the target: app/widget.yaml:1: Widget.example.com shop/gear")
            && said.contains("spec.size in body should be greater than or equal to 1"),
        "{said}"
    );
    let (_, out, err) = agent.cli(&["status", "-o", "json"]);
    let st: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {err}"));
    let st = &st["apps"][0];
    assert_eq!(st["lastAttemptedRevision"], bad.as_str(), "{st}");
    assert_ne!(st["revision"], bad.as_str(), "{st}");
    let ready = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(ready["reason"], "RejectedByTarget", "{ready}");
    let diagnostics = st["diagnostics"].to_string();
    assert!(diagnostics.contains("app/widget.yaml"), "{diagnostics}");
    assert!(
        prices.get_opt("extra").await.unwrap().is_none(),
        "nothing of it applied"
    );
    assert_eq!(widgets.get("gear").await.unwrap().data["spec"]["size"], 3);
    prices
        .patch(
            "prices",
            &edit,
            &Patch::Merge(json!({"data": {"apple": "2"}})),
        )
        .await
        .unwrap();
    agent
        .wait("the revision in force still enforced", 20, || async {
            prices.get("prices").await.unwrap().data.unwrap()["apple"] == "3"
        })
        .await;
}

const KINDS: &str = "apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: web
          image: nginx:1.27
          ports: [{containerPort: 8080}]
          resources:
            requests: {cpu: 0.5, memory: 1Gi}
            limits: {cpu: '1', memory: 1024Mi}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: db, image: 'postgres:17', resources: {requests: {cpu: 250m}}}]
  volumeClaimTemplates:
    - metadata: {name: data}
      spec:
        accessModes: [ReadWriteOnce]
        resources: {requests: {storage: 1Gi}}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly}
spec:
  schedule: '0 3 * * *'
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers: [{name: job, image: 'busybox:1.37', command: [sh, -c, 'echo hi']}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web}
spec:
  rules:
    - host: shop.example.com
      http:
        paths:
          - path: /
            pathType: Prefix
            backend: {service: {name: web, port: {number: 80}}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 2
  maxReplicas: 5
  metrics:
    - type: Resource
      resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}
";

/// Deployment, Service, StatefulSet, CronJob, Ingress and HPA, with values the API server
/// writes another way (`0.5` CPU is `500m`, `1Gi` and `1024Mi`) and fields it defaults: once
/// applied, passes find no drift and write nothing, with a positive control that they ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defaulted_and_normalized_kinds_are_not_drift_and_passes_write_nothing() {
    let cp = ControlPlane::start().await;
    let client = cp.client().await;
    let repo = common::GitRepo::new();
    repo.write("app/kinds.yaml", KINDS);
    repo.commit("kinds");
    let agent = Agent::start(&cp, &repo, "1s");
    agent.wait_synced(60).await;
    let kinds = [
        ("apps", "v1", "Deployment", "web"),
        ("", "v1", "Service", "web"),
        ("apps", "v1", "StatefulSet", "db"),
        ("batch", "v1", "CronJob", "nightly"),
        ("networking.k8s.io", "v1", "Ingress", "web"),
        ("autoscaling", "v2", "HorizontalPodAutoscaler", "web"),
    ];
    let versions = || async {
        let mut out = Vec::new();
        for (group, version, kind, name) in kinds {
            let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
                client.clone(),
                "default",
                &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
                    group, version, kind,
                )),
            );
            let o = api.get(name).await.unwrap();
            out.push((kind, o.metadata.resource_version.unwrap()));
        }
        out
    };
    let metric = |name: &'static str| async move {
        let text = reqwest::get(format!("http://127.0.0.1:{}/metrics", agent.port))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    let before = versions().await;
    let passes_before = metric("driftless_reconcile_duration_seconds_count").await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let passes_after = metric("driftless_reconcile_duration_seconds_count").await;
    assert!(
        passes_after >= passes_before + 2.0,
        "the passes ran: {passes_before} then {passes_after}"
    );
    assert_eq!(
        versions().await,
        before,
        "passes wrote nothing:\n{}",
        agent.log()
    );
    assert!(
        !agent.log().contains("Drift reverted"),
        "no drift found:\n{}",
        agent.log()
    );
    // Not even suspected: the comparison normalizes quantities as the API server does, so no
    // pass needed a dry run.
    assert!(
        !agent.log().contains("Drift suspected"),
        "no dry run:\n{}",
        agent.log()
    );
    assert_eq!(agent.status().await["sync"], "Synced");
}

/// A value the API server writes another way than Git, where the comparison does not know it
/// (an `emptyDir.sizeLimit` of `1024Mi`, stored as `1Gi`), is a suspect each time the object
/// changes: a field only driftless manages is confirmed by a dry run, not applied (an apply
/// would write, if only the managedFields time), and is no drift. A field another manager
/// wrote is drift for sure: the change-feed pass applies at once, with no dry run first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspect_only_driftless_manages_is_confirmed_and_a_field_another_manager_wrote_applied_at_once()
 {
    let cp = ControlPlane::start().await;
    let client = cp.client().await;
    let repo = common::GitRepo::new();
    repo.write(
        "app/web.yaml",
        "apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: nginx, volumeMounts: [{name: cache, mountPath: /cache}]}]
      volumes: [{name: cache, emptyDir: {sizeLimit: 1024Mi}}]
",
    );
    repo.commit("web");
    // Only the first pass is periodic: what follows comes from the change feed.
    let agent = Agent::start(&cp, &repo, "1h");
    agent.wait_synced(60).await;
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), "default");
    let live = deployments.get("web").await.unwrap();
    let live = serde_json::to_value(&live).unwrap();
    assert_eq!(
        live.pointer("/spec/template/spec/volumes/0/emptyDir/sizeLimit"),
        Some(&json!("1Gi")),
        "the server writes it its own way"
    );
    let suspected = agent.log().matches("Drift suspected").count();
    let passes = || agent.passes();
    let passes_before = passes().await;
    // Another manager labels the Deployment: the change feed brings it back to the agent.
    let labelled = deployments
        .patch(
            "web",
            &PatchParams::apply("kubectl-label").force(),
            &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "labels": {"team": "web"}}})),
        )
        .await
        .unwrap();
    let rv = labelled.metadata.resource_version.clone();
    agent
        .wait("a change-feed pass", 30, || async {
            passes().await > passes_before
        })
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = deployments.get("web").await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        rv,
        "nothing written:\n{}",
        agent.log()
    );
    assert_eq!(after.metadata.labels.as_ref().unwrap()["team"], "web");
    let log = agent.log();
    assert!(!log.contains("Drift reverted"), "no drift counted:\n{log}");
    let suspected_now = log.matches("Drift suspected").count();
    assert!(suspected_now > suspected, "confirmed by a dry run:\n{log}");
    assert_eq!(agent.status().await["sync"], "Synced");
    // Another manager changes the image: reverted, without a dry run.
    deployments
        .patch(
            "web",
            &PatchParams::apply("kubectl-edit").force(),
            &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web"}, "spec": {"template": {"spec": {"containers": [
                    {"name": "web", "image": "nginx:edited"}]}}}})),
        )
        .await
        .unwrap();
    agent
        .wait("the revert", 30, || async {
            agent.log().contains("Drift reverted")
        })
        .await;
    let image = |d: &k8s_openapi::api::apps::v1::Deployment| {
        serde_json::to_value(d).unwrap()["spec"]["template"]["spec"]["containers"][0]["image"]
            .clone()
    };
    assert_eq!(
        image(&deployments.get("web").await.unwrap()),
        json!("nginx")
    );
    let log = agent.log();
    assert!(log.contains("changed_by=kubectl-edit"), "{log}");
    assert_eq!(
        log.matches("Drift suspected").count(),
        suspected_now,
        "no dry run before a revert of another manager's change:\n{log}"
    );
}

/// Objects that exist before the app declares them: one that already matches Git is adopted;
/// one that differs, and one Argo CD tracks, are reported as conflicts and left as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn existing_objects_are_adopted_only_when_they_match_and_never_from_another_tool() {
    let cp = ControlPlane::start().await;
    let client = cp.client().await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let by_hand = PatchParams::apply("kubectl");
    for (name, extra) in [
        ("same", json!({})),
        ("differs", json!({"data": {"k": "hand"}})),
        (
            "tracked",
            json!({"metadata": {"annotations": {"argocd.argoproj.io/tracking-id": "shop:/ConfigMap:default/tracked"}}}),
        ),
    ] {
        let mut body = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name}, "data": {"k": "git"}});
        if let Some(d) = extra.get("data") {
            body["data"] = d.clone();
        }
        if let Some(m) = extra.get("metadata") {
            body["metadata"]["annotations"] = m["annotations"].clone();
        }
        configmaps
            .patch(name, &by_hand, &Patch::Apply(&body))
            .await
            .unwrap();
    }
    let repo = common::GitRepo::new();
    for name in ["same", "differs", "tracked"] {
        repo.write(
            &format!("app/{name}.yaml"),
            common::configmap(name, &[("k", "git")]),
        );
    }
    repo.commit("three");
    let agent = Agent::start(&cp, &repo, "1h");
    agent
        .wait("a conflict reported", 60, || async {
            agent.status().await["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["reason"] == "OwnershipConflict"))
        })
        .await;
    let label = |cm: &ConfigMap| {
        cm.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("driftless.io/app").cloned())
    };
    let same = configmaps.get("same").await.unwrap();
    assert_eq!(label(&same).as_deref(), Some("guestbook"), "adopted");
    let differs = configmaps.get("differs").await.unwrap();
    assert_eq!(differs.data.as_ref().unwrap()["k"], "hand");
    assert_eq!(label(&differs), None);
    let tracked = configmaps.get("tracked").await.unwrap();
    assert_eq!(label(&tracked), None);
    let resources = agent.status().await["resources"].to_string();
    assert!(
        resources.contains("managed by Argo CD (annotation argocd.argoproj.io/tracking-id); not adopted without sync.adopt"),
        "{resources}"
    );
    assert!(
        resources.contains("an existing object that differs from Git; not adopted"),
        "{resources}"
    );

    // After a restart the conflicts are still there: the revision is read again, not taken
    // from the inventory (which holds only what was applied).
    let config = agent.config();
    let kept = tempfile::tempdir().unwrap();
    std::fs::copy(&config, kept.path().join("driftless.yaml")).unwrap();
    drop(agent);
    let diff = std::process::Command::new(env!("CARGO_BIN_EXE_driftless"))
        .arg("-c")
        .arg(kept.path().join("driftless.yaml"))
        .arg("diff")
        .current_dir(kept.path())
        .output()
        .unwrap();
    assert_eq!(
        diff.status.code(),
        Some(1),
        "a conflict is a difference: {}",
        String::from_utf8_lossy(&diff.stdout)
    );
    let again = Agent::start(&cp, &repo, "1h");
    again
        .wait("the conflicts reported after a restart", 60, || async {
            let st = again.status().await;
            st["sync"] == "OutOfSync"
                && st["resources"]
                    .to_string()
                    .contains("managed by Argo CD (annotation argocd.argoproj.io/tracking-id)")
        })
        .await;
    assert!(
        !again.log().contains("New revision"),
        "the revision in force is read again, not applied as new:\n{}",
        again.log()
    );
}

/// `sync.ignore`: a Deployment under an HPA declares `replicas`, the rule gives that field to
/// the HPA: the autoscaler's change (another field manager) stays, while a change to a field
/// Git owns is still reverted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ignored_field_changed_by_an_autoscaler_stays_and_the_rest_is_still_enforced() {
    use k8s_openapi::api::apps::v1::Deployment;
    let cp = ControlPlane::start().await;
    let client = cp.client().await;
    let repo = common::GitRepo::new();
    repo.write("app/kinds.yaml", KINDS);
    repo.commit("kinds");
    let agent = Agent::start_with(
        &cp,
        &repo,
        "1s",
        "    sync:\n      ignore:\n        - paths: [/spec/replicas]\n          target: {group: apps, kind: Deployment}\n        - managers: [vpa-recommender]\n",
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    agent.wait_synced(60).await;
    // The autoscaler scales (as kube-controller-manager would, through the scale subresource's
    // field), and someone edits the image.
    let hpa = PatchParams {
        field_manager: Some("kube-controller-manager".into()),
        ..PatchParams::default()
    };
    deployments
        .patch("web", &hpa, &Patch::Merge(json!({"spec": {"replicas": 5}})))
        .await
        .unwrap();
    // A vertical autoscaler sets a limit Git declares: the rule `managers: [vpa-recommender]`
    // leaves the fields it manages to it.
    let vpa = PatchParams {
        field_manager: Some("vpa-recommender".into()),
        ..PatchParams::default()
    };
    deployments
        .patch(
            "web",
            &vpa,
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "resources": {"limits": {"memory": "2Gi"}}}]}}}})),
        )
        .await
        .unwrap();
    let edit = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    };
    deployments
        .patch(
            "web",
            &edit,
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:evil"}]}}}})),
        )
        .await
        .unwrap();
    agent
        .wait("the image reverted", 20, || async {
            let d = deployments.get("web").await.unwrap();
            d.spec.template.spec.unwrap().containers[0].image.as_deref() == Some("nginx:1.27")
        })
        .await;
    // Passes go on (the interval is 1 s): the replicas stay the autoscaler's.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let d = deployments.get("web").await.unwrap();
    assert_eq!(d.spec.replicas, Some(5), "{}", agent.log());
    let limits = d.spec.template.spec.as_ref().unwrap().containers[0]
        .resources
        .as_ref()
        .unwrap()
        .limits
        .clone()
        .unwrap();
    assert_eq!(
        limits["memory"].0,
        "2Gi",
        "the field vpa-recommender manages stays its own: {}",
        agent.log()
    );
    assert_eq!(limits["cpu"].0, "1", "the rest of the container is Git's");
    let owned_by_driftless = d
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .find(|m| m.manager.as_deref() == Some("driftless"))
        .map(|m| serde_json::to_string(&m.fields_v1).unwrap())
        .unwrap();
    assert!(
        !owned_by_driftless.contains("f:replicas"),
        "driftless does not manage the ignored field: {owned_by_driftless}"
    );
}

/// Prune on a cluster: an object whose file is removed is deleted; an object never in the
/// inventory is not; a Namespace that holds an object the app does not own is not pruned (it
/// would take that object with it), and says why; an empty revision prunes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_deletes_what_the_app_owns_and_holds_a_namespace_with_foreign_objects() {
    use k8s_openapi::api::core::v1::Namespace;
    let cp = ControlPlane::start().await;
    let client = cp.client().await;
    let repo = common::GitRepo::new();
    repo.write(
        "app/shop.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: prices\n  namespace: shop\n",
    );
    repo.write("app/gone.yaml", common::configmap("gone", &[("k", "1")]));
    repo.write("app/kept.yaml", common::configmap("kept", &[("k", "1")]));
    repo.commit("three");
    let agent = Agent::start(&cp, &repo, "1s");
    let default: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let shop: Api<ConfigMap> = Api::namespaced(client.clone(), "shop");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    agent.wait_synced(60).await;
    // Objects the app does not own: one in the app's Namespace, one beside its objects.
    let by_hand = PatchParams::apply("kubectl");
    for (api, name) in [(&shop, "foreign"), (&default, "bystander")] {
        api.patch(
            name,
            &by_hand,
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}),
            ),
        )
        .await
        .unwrap();
    }
    repo.remove("app/shop.yaml");
    repo.remove("app/gone.yaml");
    repo.commit("drop the shop and gone");
    agent
        .wait("the removed objects pruned", 30, || async {
            default.get_opt("gone").await.unwrap().is_none()
                && shop.get_opt("prices").await.unwrap().is_none()
        })
        .await;
    let said = agent.log();
    assert!(default.get_opt("gone").await.unwrap().is_none(), "{said}");
    assert!(shop.get_opt("prices").await.unwrap().is_none(), "{said}");
    assert!(default.get_opt("kept").await.unwrap().is_some());
    assert!(default.get_opt("bystander").await.unwrap().is_some());
    assert!(shop.get_opt("foreign").await.unwrap().is_some());
    let ns = namespaces.get("shop").await.unwrap();
    assert!(
        ns.metadata.deletion_timestamp.is_none(),
        "not pruned: {said}"
    );
    let st = serde_json::json!({"apps": [agent.status().await]});
    let held = st["apps"][0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == "Namespace")
        .cloned()
        .unwrap();
    assert_eq!(
        held["message"],
        "no longer in Git; not pruned: Namespace shop holds 1 object(s) the app does not own (ConfigMap shop/foreign); set sync.pruneNonEmpty: true to prune it anyway",
        "{said}"
    );

    // A revision that declares nothing prunes nothing (allowEmpty is off).
    repo.remove("app/kept.yaml");
    repo.write("app/README.md", "nothing here");
    repo.commit("empty");
    agent
        .wait("the empty revision refused", 30, || async {
            agent
                .status()
                .await
                .to_string()
                .contains("declares no objects")
        })
        .await;
    assert!(default.get_opt("kept").await.unwrap().is_some());

    // A half-written inventory (its index names shards that are not there) prunes nothing:
    // a revision without `kept` leaves it, and says why.
    let records: Api<ConfigMap> = Api::namespaced(client.clone(), "driftless-system");
    let mut inventory = records.get("inventory.guestbook").await.unwrap();
    inventory.data = Some(
        [(
            "shards".to_string(),
            json!({"digest": "ab".repeat(32), "pieces": 2, "bytes": 1000}).to_string(),
        )]
        .into(),
    );
    records
        .replace("inventory.guestbook", &Default::default(), &inventory)
        .await
        .unwrap();
    repo.remove("app/README.md");
    repo.write(
        "app/newcomer.yaml",
        common::configmap("newcomer", &[("k", "1")]),
    );
    repo.commit("kept goes, newcomer comes");
    agent
        .wait("the unreadable inventory reported", 30, || async {
            agent.log().contains("shard 1 of 2 is missing")
        })
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        default.get_opt("kept").await.unwrap().is_some(),
        "nothing pruned on an unreadable inventory: {}",
        agent.log()
    );
}

/// `scripts/kube-up`, the README's way to try the Kubernetes target without a cluster, starts
/// an API server that answers with the kubeconfig it writes, and stops it on SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kube_up_script_starts_a_local_api_server_the_agent_can_use() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/kube-up");
    let mut child = std::process::Command::new(&script)
        .arg(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let kubeconfig = tokio::task::spawn_blocking(move || {
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|l| l.strip_prefix("export KUBECONFIG=").map(PathBuf::from))
    })
    .await
    .unwrap()
    .expect("kube-up prints the KUBECONFIG to export");
    let client = common::kube::client_from(&kubeconfig).await;
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.minor, "37");
    // SIGTERM stops the script and both servers.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    child.wait().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while client.apiserver_version().await.is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the API server still answers"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The change feed rides out the API server: it goes down (SIGKILL), a change is made through
/// another API server on the same etcd while it is down, and etcd's history is compacted past
/// the agent's last resourceVersion. When the API server is back, the agent's watch resumes,
/// is told `410 Gone` (its resourceVersion is older than anything the new watch cache holds),
/// relists, and reverts the change made in the gap; no periodic pass helps (the interval is an
/// hour).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_resumes_after_the_api_server_restarts_and_relists_after_a_compaction() {
    let mut cp = ControlPlane::start().await;
    let repo = settings_repo();
    let agent = Agent::start(&cp, &repo, "1h");
    let configmaps: Api<ConfigMap> = Api::namespaced(cp.client().await, "default");
    agent.wait_synced(60).await;
    // The watch is live: a change is reverted from it.
    edit_to_red(&configmaps).await;
    agent
        .wait("the first drift reverted", 20, || async {
            settings_mode(&configmaps).await.as_deref() == Some("blue")
        })
        .await;

    cp.stop_apiserver();
    let second = cp.second_apiserver().await;
    let through_second: Api<ConfigMap> = Api::namespaced(
        common::kube::client_from(&second.kubeconfig).await,
        "default",
    );
    edit_to_red(&through_second).await;
    let compacted = cp.compact_etcd().await;
    drop(second);
    cp.start_apiserver().await;
    let configmaps: Api<ConfigMap> = Api::namespaced(cp.client().await, "default");
    agent
        .wait("the change made in the gap reverted", 60, || async {
            settings_mode(&configmaps).await.as_deref() == Some("blue")
        })
        .await;
    let said = agent.log();
    assert!(
        said.contains("Change feed relisted; enforcing every object"),
        "relisted after the compaction at {compacted}: {said}"
    );
    // And the watch goes on: a change after the restart is reverted from it too.
    edit_to_red(&configmaps).await;
    agent
        .wait("drift after the restart reverted", 20, || async {
            settings_mode(&configmaps).await.as_deref() == Some("blue")
        })
        .await;
}

/// No request waits forever on an API server that does not answer: every connection to it is
/// cut and, for 20 s, new ones are accepted and never answered (as an API server that is
/// starting, or a network that drops packets, may do). The agent says it cannot renew its
/// Leases (a pass is given up in half the TTL, so its gates close in time), its watch starts
/// again once answers come back (a change made after that is reverted from the watch: the
/// interval is an hour), and the held connections stay silent forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_api_server_never_answers_is_given_up_and_the_watch_starts_again() {
    let cp = ControlPlane::start().await;
    let proxy = common::proxy::Proxy::start(cp.addr()).await;
    let repo = settings_repo();
    let store = format!(
        "{{kubeconfig: {}}}",
        cp.kubeconfig_via(proxy.addr).display()
    );
    let agent = Agent::start_on(&store, &repo, "1h", "");
    let configmaps: Api<ConfigMap> = Api::namespaced(cp.client().await, "default");
    agent.wait_synced(60).await;
    let drift_reverted = |what: &'static str| {
        let (agent, configmaps) = (&agent, configmaps.clone());
        async move {
            edit_to_red(&configmaps).await;
            agent
                .wait(what, 30, || async {
                    settings_mode(&configmaps).await.as_deref() == Some("blue")
                })
                .await;
        }
    };
    drift_reverted("drift reverted through the proxy").await;
    // At start the Lease may be taken before the app's loop first looks (then it says
    // nothing): count the takeovers from here.
    let held = |log: &str| log.matches("This replica holds the app now").count();
    let before = held(&agent.log());

    proxy.cut(true);
    tokio::time::sleep(std::time::Duration::from_secs(20)).await;
    proxy.heal();
    // Answered again: the agent holds the app again (its full pass reverts what changed),
    // then a change is reverted from a watch that started again.
    agent
        .wait("the app held again after the silence", 60, || async {
            held(&agent.log()) > before
        })
        .await;
    drift_reverted("drift after the silence reverted from the watch").await;
    let said = agent.log();
    assert!(
        said.contains("Replica coordination through Leases failed"),
        "a Lease renewal that got no answer was given up: {said}"
    );
}

/// Health from the status controllers write: no controller runs here, so the test writes a
/// Deployment's status through the status subresource as kube-controller-manager would.
/// Before any status: Progressing; rolled out: Healthy; past its progress deadline: Degraded,
/// with the reason in the message. A status write is never drift.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_the_status_a_controller_writes_through_the_status_subresource() {
    use k8s_openapi::api::apps::v1::Deployment;
    let cp = ControlPlane::start().await;
    let repo = common::GitRepo::new();
    repo.write(
        "app/web.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers: [{name: web, image: 'nginx:1.27'}]\n",
    );
    repo.commit("web");
    let agent = Agent::start(&cp, &repo, "1h");
    let deployments: Api<Deployment> = Api::namespaced(cp.client().await, "default");
    let web = || async {
        let st = agent.status().await;
        let r = st["resources"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["name"] == "web").cloned())
            .unwrap_or_default();
        (st["health"].clone(), r)
    };
    agent
        .wait("Progressing before any status", 60, || async {
            let (app, r) = web().await;
            app == "Progressing" && r["health"] == "Progressing"
        })
        .await;
    let controller = PatchParams::apply("kube-controller-manager").force();
    let generation = deployments.get("web").await.unwrap().metadata.generation;
    let status = |conditions: serde_json::Value| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "status": {"observedGeneration": generation, "replicas": 2, "updatedReplicas": 2,
                "readyReplicas": 2, "availableReplicas": 2, "conditions": conditions}})
    };
    deployments
        .patch_status(
            "web",
            &controller,
            &Patch::Apply(status(json!([
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]))),
        )
        .await
        .unwrap();
    agent
        .wait("Healthy once rolled out", 20, || async {
            let (app, r) = web().await;
            app == "Healthy" && r["health"] == "Healthy"
        })
        .await;
    deployments
        .patch_status(
            "web",
            &controller,
            &Patch::Apply(status(json!([
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                 "message": "ReplicaSet \"web-5d\" has timed out progressing."}]))),
        )
        .await
        .unwrap();
    agent
        .wait("Degraded past the progress deadline", 20, || async {
            let (app, r) = web().await;
            app == "Degraded"
                && r["health"] == "Degraded"
                && r["healthMessage"]
                    .as_str()
                    .is_some_and(|m| m.contains("exceeded its progress deadline"))
        })
        .await;
    let said = agent.log();
    assert!(
        !said.contains("Drift reverted"),
        "a status write is not drift: {said}"
    );
    assert_eq!(agent.status().await["sync"], "Synced");
}

/// The agent as the chart deploys it: the chart's ServiceAccount, ClusterRole, Role and
/// bindings (from `helm template`, the real helm) applied to the cluster, and the agent
/// authenticated by a token from the TokenRequest API, as a pod's projected token is. It syncs
/// guestbook; a PriorityClass, a kind the default role does not allow, is refused by the API
/// server and the app's condition names the kind and the verb; nothing of that revision is
/// applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_runs_as_the_charts_service_account_and_names_what_its_role_does_not_allow() {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    use kube::api::{DynamicObject, PostParams};
    use kube::core::{ApiResource, GroupVersionKind};
    let cp = ControlPlane::start().await;
    let admin = cp.client().await;
    let root = common::data_dir().join("../..");
    let out = std::process::Command::new(common::tool("HELM_BIN", "helm"))
        .args([
            "template",
            "d",
            "charts/driftless",
            "--namespace",
            "driftless",
        ])
        .args(["--set", "kubernetes.enabled=true"])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = String::from_utf8(out.stdout).unwrap();
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "driftless"}});
    let mut docs = vec![ns];
    for doc in rendered.split("\n---") {
        let v: serde_json::Value = serde_saphyr::from_str(doc).unwrap_or_default();
        let kind = v["kind"].as_str().unwrap_or_default();
        if [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
        ]
        .contains(&kind)
        {
            docs.push(v);
        }
    }
    assert_eq!(docs.len(), 6, "the chart's RBAC: {rendered}");
    for doc in &docs {
        let (group, version) = match doc["apiVersion"].as_str().unwrap().split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", doc["apiVersion"].as_str().unwrap()),
        };
        let gvk = GroupVersionKind::gvk(group, version, doc["kind"].as_str().unwrap());
        let ar = ApiResource::from_gvk(&gvk);
        let api: Api<DynamicObject> = match doc["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(admin.clone(), ns, &ar),
            None if doc["kind"] == "ServiceAccount" => {
                Api::namespaced_with(admin.clone(), "driftless", &ar)
            }
            None => Api::all_with(admin.clone(), &ar),
        };
        api.patch(
            doc["metadata"]["name"].as_str().unwrap(),
            &PatchParams::apply("helm"),
            &Patch::Apply(doc),
        )
        .await
        .unwrap_or_else(|e| panic!("apply {doc}: {e}"));
    }
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "driftless");
    let token = accounts
        .create_token_request(
            "d-driftless",
            &PostParams::default(),
            &TokenRequest {
                spec: Some(TokenRequestSpec {
                    expiration_seconds: Some(3600),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .status
        .and_then(|s| s.token)
        .expect("a token");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: sa\nclusters:\n- name: test\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: sa\n  user:\n    token: {token}\ncontexts:\n- name: sa\n  context:\n    cluster: test\n    user: sa\n",
            cp.url,
            cp.ca().display()
        ),
    )
    .unwrap();

    let repo = common::GitRepo::new();
    let guestbook = common::data_dir().join("../../examples/guestbook");
    for entry in std::fs::read_dir(&guestbook).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        repo.write(&format!("app/{name}"), std::fs::read(&path).unwrap());
    }
    let first = repo.commit("guestbook");
    let store = format!(
        "{{kubeconfig: {}, namespace: driftless}}",
        kubeconfig.display()
    );
    let agent = Agent::start_on(&store, &repo, "1s", "");
    agent.wait_synced(60).await;
    let records: Api<ConfigMap> = Api::namespaced(admin.clone(), "driftless");
    assert!(
        records
            .get_opt("inventory.guestbook")
            .await
            .unwrap()
            .is_some(),
        "the records live in the release's namespace"
    );

    repo.write(
        "app/priority.yaml",
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: batch}\nvalue: 1000\n",
    );
    repo.write("app/more.yaml", common::configmap("more", &[("k", "v")]));
    repo.commit("a kind the role does not allow");
    agent
        .wait("the refusal named", 30, || async {
            let st = agent.status().await;
            let text = st.to_string();
            text.contains("RejectedByTarget")
                && text.contains("priorityclasses")
                && text.contains("cannot patch resource")
        })
        .await;
    let st = agent.status().await;
    assert_eq!(st["revision"], first, "the last good revision stays: {st}");
    let configmaps: Api<ConfigMap> = Api::namespaced(admin, "default");
    assert!(
        configmaps.get_opt("more").await.unwrap().is_none(),
        "nothing of the refused revision applied"
    );
}

/// Two replicas on one cluster share the app through Leases: one takes it, the other stands
/// by; `driftless status` names the holder. SIGKILL of the holder: the other takes the app
/// over once the holder's Lease has stood still for the TTL (3 s here), within the TTL and a
/// third of it plus a pass, and reverts drift from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_the_app_through_leases_and_one_takes_over_from_a_killed_holder() {
    let cp = ControlPlane::start().await;
    let repo = settings_repo();
    let store = format!("{{kubeconfig: {}, leaseTTL: 3s}}", cp.kubeconfig.display());
    let r1 = Agent::start_replica(&store, &repo, "1h", "", "r1");
    let r2 = Agent::start_replica(&store, &repo, "1h", "", "r2");
    let configmaps: Api<ConfigMap> = Api::namespaced(cp.client().await, "default");
    let took = |a: &Agent| a.log().contains("App Lease taken");
    r1.wait("one replica takes the app and syncs", 60, || async {
        (took(&r1) || took(&r2)) && configmaps.get_opt("settings").await.unwrap().is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        took(&r1) != took(&r2),
        "exactly one holds the app:\nr1: {}\nr2: {}",
        r1.log(),
        r2.log()
    );
    let (mut holder, other, holder_name) = if took(&r1) {
        (r1, r2, "r1")
    } else {
        (r2, r1, "r2")
    };
    let (code, out, err) = other.cli(&["status", "-o", "json"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains(&format!("\"replica\": \"{holder_name}\"")),
        "status names the holder {holder_name}: {out}"
    );

    holder.child.kill().unwrap();
    let killed = std::time::Instant::now();
    other
        .wait("the standby takes the app over", 20, || async {
            took(&other)
        })
        .await;
    let took_over = killed.elapsed();
    assert!(
        took_over < Duration::from_secs(3 + 1 + 2),
        "taken over {took_over:?} after the kill: {}",
        other.log()
    );
    let edit = PatchParams::apply("kubectl-edit").force();
    configmaps
        .patch(
            "settings",
            &edit,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings"}, "data": {"mode": "red"}})),
        )
        .await
        .unwrap();
    other
        .wait("the new holder reverts drift", 20, || async {
            configmaps.get("settings").await.unwrap().data.unwrap()["mode"] == "blue"
        })
        .await;
    eprintln!("taken over {took_over:?} after SIGKILL of the holder (leaseTTL 3s)");
}

/// Pull-request previews on a cluster: a pull request's head is planned against the app and
/// checked by a server-side dry run (one the API server would refuse says so with the file
/// and line, before anyone merges it); a deployed preview gets a Namespace driftless creates,
/// and when the pull request's ref goes, its objects and then its Namespace are deleted. The
/// app's own objects are never touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn previews_plan_by_dry_run_and_deploy_into_a_namespace_driftless_creates_and_deletes() {
    use k8s_openapi::api::core::v1::Namespace;
    let cp = ControlPlane::start().await;
    let client = cp.client().await;
    let repo = settings_repo();
    let main = repo.head();
    let agent = Agent::start_with(
        &cp,
        &repo,
        "1s",
        "    preview:\n      refs: \"refs/pull/*/head\"\n      deploy: true\n",
    );
    let default: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    agent.wait_synced(60).await;
    let app_version = default
        .get("settings")
        .await
        .unwrap()
        .metadata
        .resource_version;
    // Pull request 3: a change and a new object.
    let push_pr = |number: u32, files: &[(&str, &str)]| {
        repo.git(&["checkout", "-q", "-B", &format!("pr{number}"), &main]);
        for (path, text) in files {
            repo.write(path, *text);
        }
        let head = repo.commit(&format!("pr {number}"));
        repo.git(&["update-ref", &format!("refs/pull/{number}/head"), &head]);
        repo.git(&["checkout", "-q", "main"]);
        head
    };
    push_pr(
        3,
        &[
            (
                "app/settings.yaml",
                &common::configmap("settings", &[("mode", "green")]),
            ),
            ("app/extra.yaml", &common::configmap("extra", &[("k", "v")])),
        ],
    );
    let pr3: Api<ConfigMap> = Api::namespaced(client.clone(), "pr-3");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    agent
        .wait("the preview deployed into pr-3", 60, || async {
            pr3.get_opt("extra").await.ok().flatten().is_some()
                && pr3
                    .get_opt("settings")
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|c| c.data.unwrap()["mode"] == "green")
        })
        .await;
    let ns = namespaces.get("pr-3").await.unwrap();
    assert!(
        ns.metadata
            .managed_fields
            .unwrap_or_default()
            .iter()
            .any(|m| m.manager.as_deref() == Some("driftless")),
        "driftless made the preview's Namespace"
    );
    // Pull request 4: an object the API server refuses (a Deployment without a selector).
    push_pr(
        4,
        &[(
            "app/web.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers: [{name: web, image: nginx}]\n",
        )],
    );
    let previews = || async {
        let Ok(r) = reqwest::get(format!(
            "http://127.0.0.1:{}/api/v1/apps/guestbook/previews",
            agent.port
        ))
        .await
        else {
            return serde_json::Value::Null;
        };
        r.json::<serde_json::Value>().await.unwrap_or_default()
    };
    agent
        .wait("pull request 4 refused by the dry run", 60, || async {
            previews()
                .await
                .to_string()
                .contains("refused by the target: app/web.yaml:1: ")
        })
        .await;
    let listed = previews().await.to_string();
    assert!(
        listed.contains("selector"),
        "the server's message: {listed}"
    );
    assert!(
        Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), "pr-4")
            .get_opt("web")
            .await
            .map_or(true, |d| d.is_none()),
        "nothing of a refused preview is deployed"
    );
    // Pull request 3's ref goes: its objects, then its Namespace, go with it.
    repo.git(&["update-ref", "-d", "refs/pull/3/head"]);
    agent
        .wait("the preview environment deleted", 60, || async {
            pr3.get_opt("extra").await.ok().flatten().is_none()
                && namespaces
                    .get_opt("pr-3")
                    .await
                    .unwrap()
                    .is_none_or(|n| n.metadata.deletion_timestamp.is_some())
        })
        .await;
    assert_eq!(
        default
            .get("settings")
            .await
            .unwrap()
            .metadata
            .resource_version,
        app_version,
        "the app's own objects are untouched"
    );
}

/// Two apps that declare one object at once (both start together, each from the same folder):
/// one owns it, its label names that one, and the other reports the conflict naming the owner;
/// neither fights the other over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_apps_claiming_one_object_at_once_leave_it_one_owner() {
    let cp = ControlPlane::start().await;
    let repo = common::GitRepo::new();
    repo.write(
        "app/shared.yaml",
        common::configmap("shared", &[("k", "1")]),
    );
    repo.commit("shared");
    let second = format!(
        "  - name: second\n    source:\n      repo: {}\n      path: app\n      interval: 1s\n",
        repo.url()
    );
    let agent = Agent::start_with(&cp, &repo, "1s", &second);
    let configmaps: Api<ConfigMap> = Api::namespaced(cp.client().await, "default");
    let apps = || async {
        let Ok(r) = reqwest::get(format!("http://127.0.0.1:{}/api/v1/apps", agent.port)).await
        else {
            return serde_json::Value::Null;
        };
        r.json::<serde_json::Value>().await.unwrap_or_default()["apps"].clone()
    };
    agent
        .wait("one owner, one conflict", 60, || async {
            let a = apps().await;
            let syncs: Vec<String> = a
                .as_array()
                .map(|v| v.iter().map(|x| x["sync"].to_string()).collect())
                .unwrap_or_default();
            syncs.len() == 2
                && syncs.contains(&"\"Synced\"".to_string())
                && a.to_string().contains("which owns it")
        })
        .await;
    let a = apps().await;
    let owner = a
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["sync"] == "Synced")
        .unwrap()["name"]
        .as_str()
        .unwrap()
        .to_string();
    let live = configmaps.get("shared").await.unwrap();
    assert_eq!(
        live.metadata.labels.unwrap()["driftless.io/app"],
        owner,
        "the label names the owner"
    );
    assert!(
        a.to_string()
            .contains(&format!("also declared by app {owner}, which owns it")),
        "{a}"
    );
    // No tug of war: passes go on and the object stays as the owner wrote it.
    let rv = live.metadata.resource_version;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        configmaps
            .get("shared")
            .await
            .unwrap()
            .metadata
            .resource_version,
        rv,
        "{}",
        agent.log()
    );
}
