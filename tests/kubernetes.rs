//! The pieces of a Kubernetes test fit: a `kube-apiserver` built from source and etcd 3.6 start
//! on loopback with RBAC on, and kube-rs over rustls applies a ConfigMap with server-side apply
//! as an admin authenticated by a client certificate, then reads it back.
#![cfg(feature = "kubernetes")]

mod common;

use common::kube::ControlPlane;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

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
    use std::time::Duration;

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
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port();
    std::fs::write(
        dir.path().join("driftless.yaml"),
        format!(
            "store:\n  kubernetes: {{kubeconfig: {}}}\ncacheDir: cache\nserver: {{listen: \"127.0.0.1:{port}\"}}\napps:\n  - name: guestbook\n    source:\n      repo: {}\n      path: app\n      interval: 1s\n",
            cp.kubeconfig.display(),
            repo.url()
        ),
    )
    .unwrap();
    let log_path = dir.path().join("agent.log");
    let agent = std::process::Command::new(env!("CARGO_BIN_EXE_driftless"))
        .arg("-c")
        .arg(dir.path().join("driftless.yaml"))
        .arg("run")
        .current_dir(dir.path())
        .env("RUST_LOG", "info,driftless=debug")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _agent = Kill(agent);
    {
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
        let services: Api<Service> = Api::namespaced(client.clone(), "default");
        let wait = |secs: u64| tokio::time::Instant::now() + Duration::from_secs(secs);
        // How many reconciles the agent has run (its metric).
        let passes = || async {
            let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
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
        };
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
        let before = vec![
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
        ];
        let passes_before = passes().await;
        tokio::time::sleep(Duration::from_secs(4)).await;
        let after = vec![
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
        ];
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
