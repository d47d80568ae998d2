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
