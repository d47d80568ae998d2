//! The Helm chart (`charts/driftless`), linted and rendered by the real `helm` binary (the one
//! `scripts/test` builds from `tools/helm`, `HELM_BIN`): `helm lint --strict`, and
//! `helm install --dry-run=client -o json`, which renders the templates and NOTES.txt as an
//! install would, with no cluster. Checks the kinds, probes and security context of what it
//! renders, that the config in the ConfigMap passes driftless's own config validation, that no
//! secret value is inlined, and that bad values are refused. Also: every example config in
//! `config/` loads.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use driftless::object::Object;
use serde_json::{Value, json};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

struct Rendered {
    /// `helm lint --strict`'s exit status and output.
    lint: (bool, String),
    /// Why `helm install --dry-run` refused the values (a schema violation, a `fail` in a
    /// template), when it did.
    error: Option<String>,
    /// Each rendered template by its path (`driftless/templates/deployment.yaml`), NOTES.txt
    /// included.
    manifests: BTreeMap<String, String>,
}

impl Rendered {
    /// Every rendered object, by kind.
    fn objects(&self) -> BTreeMap<String, Vec<Object>> {
        let mut out: BTreeMap<String, Vec<Object>> = BTreeMap::new();
        for (path, text) in &self.manifests {
            if !path.ends_with(".yaml") {
                continue;
            }
            let parsed = driftless::manifest::parse_file(path, text.as_bytes());
            let errors: Vec<_> = parsed
                .diagnostics
                .iter()
                .filter(|d| d.severity == driftless::manifest::Severity::Error)
                .collect();
            assert!(errors.is_empty(), "{path}: {errors:?}\n{text}");
            for d in parsed.objects {
                out.entry(d.object.kind().to_string())
                    .or_default()
                    .push(d.object);
            }
        }
        out
    }
}

/// Runs `helm` with its own empty config, cache and data folders and no cluster, so that
/// nothing of the machine's Helm setup or kubeconfig is read.
fn helm(home: &Path, args: &[String]) -> Output {
    let bin = common::tool("HELM_BIN", "helm");
    Command::new(&bin)
        .args(args)
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env("KUBECONFIG", home.join("no-kubeconfig"))
        .output()
        .unwrap_or_else(|e| panic!("{bin} runs: {e}"))
}

/// Splits `helm`'s manifest stream into its templates at the `# Source: <path>` line Helm
/// puts before each document.
fn by_source(manifest: &str) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in manifest.lines() {
        if let Some(path) = line.strip_prefix("# Source: ") {
            current = Some(path.trim().to_string());
            continue;
        }
        if let Some(path) = &current {
            let text = out.entry(path.clone()).or_default();
            text.push_str(line);
            text.push('\n');
        }
    }
    out
}

/// Lints and renders the chart with these values files and `--set-json` values.
fn render(values: &[&str], set: Option<Value>) -> Rendered {
    let home = tempfile::tempdir().unwrap();
    let chart = root().join("charts/driftless").display().to_string();
    let mut extra = Vec::new();
    for v in values {
        extra.push("-f".to_string());
        extra.push(root().join(v).display().to_string());
    }
    if let Some(s) = set {
        extra.push("--set-json".to_string());
        extra.push(s.to_string());
    }
    let mut lint = vec!["lint".to_string(), "--strict".to_string(), chart.clone()];
    lint.extend(extra.iter().cloned());
    let lint = helm(home.path(), &lint);
    let mut install: Vec<String> = [
        "install",
        "rel",
        &chart,
        "--namespace",
        "gitops",
        "--dry-run=client",
        "-o",
        "json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    install.extend(extra);
    let out = helm(home.path(), &install);
    let (error, manifests) = if out.status.success() {
        let release: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("helm install -o json: {e}: {}", common::stderr(&out)));
        let mut manifests = by_source(release["manifest"].as_str().unwrap_or_default());
        if let Some(notes) = release["info"]["notes"].as_str() {
            manifests.insert("driftless/templates/NOTES.txt".into(), notes.into());
        }
        (None, manifests)
    } else {
        (Some(common::stderr(&out)), BTreeMap::new())
    };
    Rendered {
        lint: (
            lint.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&lint.stdout),
                common::stderr(&lint)
            ),
        ),
        error,
        manifests,
    }
}

fn assert_clean(r: &Rendered) {
    let (ok, output) = &r.lint;
    assert!(*ok, "helm lint --strict: {output}");
    assert!(
        !output.contains("[WARNING]") && !output.contains("[ERROR]"),
        "lint warnings or errors: {output}"
    );
    assert_eq!(r.error, None);
}

fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(v, |v, k| match k.parse::<usize>() {
        Ok(i) => &v[i],
        Err(_) => &v[k],
    })
}

/// The one Deployment's pod template, checked for probes and the security context.
fn check_pod(objects: &BTreeMap<String, Vec<Object>>) -> Value {
    let deployments = &objects["Deployment"];
    assert_eq!(deployments.len(), 1);
    let d = serde_json::Value::Object(deployments[0].as_map().clone());
    let pod = at(&d, "spec.template.spec").clone();
    let c = at(&pod, "containers.0");
    assert_eq!(at(c, "livenessProbe.httpGet.path"), "/healthz");
    assert_eq!(at(c, "readinessProbe.httpGet.path"), "/readyz");
    assert_eq!(at(c, "livenessProbe.httpGet.port"), "http");
    assert_eq!(at(c, "ports.0.name"), "http");
    assert_eq!(at(&pod, "securityContext.runAsNonRoot"), true);
    assert_ne!(at(&pod, "securityContext.runAsUser"), 0);
    assert_eq!(at(c, "securityContext.readOnlyRootFilesystem"), true);
    assert_eq!(at(c, "securityContext.allowPrivilegeEscalation"), false);
    assert_eq!(at(c, "securityContext.capabilities.drop"), &json!(["ALL"]));
    // The store and cache are on a volume, not the read-only root.
    let mounts: Vec<&str> = at(c, "volumeMounts")
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    assert!(mounts.contains(&"/var/lib/driftless"), "{mounts:?}");
    assert!(mounts.contains(&"/etc/driftless/config"), "{mounts:?}");
    assert!(at(c, "resources.requests").is_object());
    // The pod is its replica's name.
    let env = at(c, "env").as_array().unwrap();
    assert!(
        env.iter().any(|e| e["name"] == "DRIFTLESS_REPLICA"
            && e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"),
        "{env:?}"
    );
    d
}

/// The driftless config in the ConfigMap, validated by driftless itself.
/// The kinds rendered, in order.
fn kinds(objects: &BTreeMap<String, Vec<Object>>) -> Vec<&str> {
    objects.keys().map(String::as_str).collect()
}

fn check_config(objects: &BTreeMap<String, Vec<Object>>) -> driftless::config::Loaded {
    let cm = serde_json::Value::Object(objects["ConfigMap"][0].as_map().clone());
    let text = cm["data"]["driftless.yaml"].as_str().unwrap();
    driftless::config::parse(Path::new("/etc/driftless/config/driftless.yaml"), text)
        .unwrap_or_else(|e| panic!("the chart's config does not validate: {e}\n{text}"))
}

#[test]
fn the_default_values_render_one_agent_on_sqlite_with_a_volume() {
    let r = render(&[], None);
    assert_clean(&r);
    let objects = r.objects();
    assert_eq!(
        kinds(&objects),
        [
            "ConfigMap",
            "Deployment",
            "PersistentVolumeClaim",
            "Service",
            "ServiceAccount"
        ]
    );
    let d = check_pod(&objects);
    assert_eq!(at(&d, "spec.replicas"), 1);
    assert_eq!(
        at(&d, "spec.strategy.type"),
        "Recreate",
        "never two agents on one SQLite store"
    );
    let cfg = check_config(&objects);
    assert_eq!(
        cfg.sqlite_path(),
        Some(Path::new("/var/lib/driftless/store.db"))
    );
    assert_eq!(cfg.config.server.listen.value, "0.0.0.0:7777");
    let svc = serde_json::Value::Object(objects["Service"][0].as_map().clone());
    assert_eq!(at(&svc, "spec.ports.0.targetPort"), "http");
    assert!(
        r.manifests["driftless/templates/NOTES.txt"].contains("driftless"),
        "NOTES.txt renders"
    );
}

#[test]
fn etcd_replicas_with_webhooks_render_without_inlining_a_secret() {
    let r = render(&["charts/driftless/tests/etcd-webhooks.values.yaml"], None);
    assert_clean(&r);
    let objects = r.objects();
    assert_eq!(
        kinds(&objects),
        [
            "ConfigMap",
            "Deployment",
            "Ingress",
            "Service",
            "ServiceAccount",
            "ServiceMonitor"
        ],
        "no PersistentVolumeClaim (each replica's cache is an emptyDir) and no Secret"
    );
    let d = check_pod(&objects);
    assert_eq!(at(&d, "spec.replicas"), 3);
    let cfg = check_config(&objects);
    let etcd = &cfg.config.store.etcd.as_ref().expect("an etcd store").value;
    assert_eq!(etcd.endpoints.len(), 2);
    assert_eq!(etcd.lease_ttl.value, std::time::Duration::from_secs(10));
    assert!(cfg.sqlite_path().is_none());
    // Every secret of the config is a file of the mounted Secret or the etcd TLS Secret.
    let pod = at(&d, "spec.template.spec");
    let volumes = at(pod, "volumes").as_array().unwrap();
    let secret_of = |name: &str| {
        volumes
            .iter()
            .find(|v| v["name"] == name)
            .map(|v| v["secret"]["secretName"].clone())
    };
    assert_eq!(secret_of("secrets"), Some(json!("driftless-secrets")));
    assert_eq!(secret_of("etcd-tls"), Some(json!("etcd-client-tls")));
    let refs = [
        etcd.password.as_ref().unwrap().value.file.clone(),
        cfg.config.server.token.as_ref().unwrap().value.file.clone(),
        cfg.config
            .server
            .webhooks
            .github
            .as_ref()
            .unwrap()
            .secret
            .value
            .file
            .clone(),
        cfg.config.apps[0]
            .status
            .as_ref()
            .unwrap()
            .token
            .value
            .file
            .clone(),
    ];
    for r in refs {
        let r = r.expect("a file reference, not a value");
        assert!(r.starts_with("/etc/driftless/secrets/"), "{}", r.display());
    }
    for o in objects.values().flatten() {
        assert_ne!(o.kind(), "Secret");
        let env = serde_json::Value::Object(o.as_map().clone()).to_string();
        assert!(!env.contains("\"env\":{\"name\""), "no secret in env");
    }
    // The Ingress routes the webhooks, the ServiceMonitor scrapes /metrics.
    let ing = serde_json::Value::Object(objects["Ingress"][0].as_map().clone());
    assert_eq!(at(&ing, "spec.rules.0.http.paths.0.path"), "/webhooks");
    let sm = serde_json::Value::Object(objects["ServiceMonitor"][0].as_map().clone());
    assert_eq!(at(&sm, "spec.endpoints.0.path"), "/metrics");
    assert_eq!(at(&sm, "metadata.labels.release"), "prometheus");
}

#[test]
fn bad_values_are_refused_with_the_reason() {
    let refused = |set: Value, says: &[&str]| {
        let r = render(&[], Some(set.clone()));
        let error = r
            .error
            .unwrap_or_else(|| panic!("{set} is accepted: {:?}", r.manifests.keys()));
        for s in says {
            assert!(error.contains(s), "{set}: {s:?} not in: {error}");
        }
    };
    refused(json!({"replicaCout": 2}), &["schema", "replicaCout"]);
    refused(
        json!({"replicaCount": "three"}),
        &["schema", "/replicaCount"],
    );
    refused(
        json!({"replicaCount": 2}),
        &["replicaCount > 1 needs etcd.enabled or kubernetes.enabled"],
    );
    refused(
        json!({"server": {"tokenKey": "sync-token"}}),
        &["needs existingSecret"],
    );
    refused(
        json!({"apps": [{"name": "Not_A_Label", "source": {"repo": "x"}}]}),
        &["schema", "/apps/0/name"],
    );
    refused(
        json!({"kubernetes": {"enabled": true}, "etcd": {"enabled": true, "endpoints": ["http://e:2379"]}}),
        &["choose one store"],
    );
}

#[test]
fn the_kubernetes_target_renders_a_service_account_its_roles_and_an_in_cluster_store() {
    let r = render(
        &[],
        Some(json!({"kubernetes": {"enabled": true}, "replicaCount": 2})),
    );
    assert_clean(&r);
    let objects = r.objects();
    assert_eq!(
        kinds(&objects),
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "Deployment",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount"
        ]
    );
    let d = check_pod(&objects);
    assert_eq!(
        at(&d, "spec.replicas"),
        2,
        "replicas share the apps through Leases"
    );
    assert_eq!(
        at(&d, "spec.template.spec.serviceAccountName"),
        "rel-driftless"
    );
    assert_eq!(
        at(&d, "spec.template.spec.automountServiceAccountToken"),
        true
    );
    let cfg = check_config(&objects);
    let k = &cfg.config.store.kubernetes.as_ref().unwrap().value;
    assert_eq!(
        (k.namespace.value.as_str(), k.field_manager.value.as_str()),
        ("gitops", "driftless"),
        "records in the release's namespace"
    );
    assert!(
        k.kubeconfig.is_none(),
        "in-cluster: the ServiceAccount's token"
    );
    let role = serde_json::Value::Object(objects["Role"][0].as_map().clone());
    assert_eq!(at(&role, "metadata.namespace"), "gitops");
    assert_eq!(at(&role, "rules.0.resources.0"), "configmaps");
    assert_eq!(
        at(&role, "rules.1.resources.0"),
        "leases",
        "the replicas' Leases"
    );
    assert_eq!(k.lease_ttl.value, std::time::Duration::from_secs(15));
    let binding = serde_json::Value::Object(objects["ClusterRoleBinding"][0].as_map().clone());
    assert_eq!(at(&binding, "subjects.0.name"), "rel-driftless");
    assert_eq!(at(&binding, "subjects.0.namespace"), "gitops");
    // Without the Kubernetes target, the token stays unmounted.
    let plain = render(&[], None);
    let d = check_pod(&plain.objects());
    assert_eq!(
        at(&d, "spec.template.spec.automountServiceAccountToken"),
        false
    );
}

#[test]
fn every_example_config_loads_and_validates() {
    let dir = root().join("config");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            driftless::config::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            seen += 1;
        }
    }
    assert!(seen >= 6, "the quickstart and the five examples: {seen}");
}

#[test]
fn the_dockerfile_builds_a_release_with_etcd_and_runs_as_non_root() {
    // No Docker daemon or image registry here: check what the image build relies on.
    let text = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let froms: Vec<&str> = text.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 3, "multi-stage: {froms:?}");
    assert!(froms[0].ends_with(" AS build"), "{froms:?}");
    // The renderers, built from the modules tools/ pins, at the versions scripts/test tests.
    assert!(froms[1].starts_with("FROM golang:1.26") && froms[1].ends_with(" AS renderers"));
    for needed in [
        "COPY tools/kustomize kustomize",
        "COPY tools/helm helm",
        "GOFLAGS=\"-mod=readonly",
        "sigs.k8s.io/kustomize/kustomize/v5",
        "helm.sh/helm/v4/cmd/helm",
        "COPY --from=renderers /out/kustomize /out/helm /usr/local/bin/",
    ] {
        assert!(text.contains(needed), "{needed}");
    }
    assert!(
        text.contains("cargo build --release --locked --features etcd"),
        "a locked release build with the etcd feature"
    );
    assert!(
        text.contains("protobuf-compiler"),
        "etcd-client's build needs protoc"
    );
    let user = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER");
    let uid: u32 = user
        .split(':')
        .next()
        .unwrap()
        .parse()
        .expect("a numeric user");
    assert_ne!(uid, 0, "the runtime is not root");
    // Everything the build stage copies exists, and covers what Cargo needs to build.
    for line in text
        .lines()
        .filter(|l| l.starts_with("COPY ") && !l.contains("--from"))
    {
        let parts: Vec<&str> = line.split_whitespace().collect();
        for src in &parts[1..parts.len() - 1] {
            assert!(root().join(src).exists(), "COPY {src}: no such path");
        }
    }
    // Cargo reads every declared target's file, benches included, before it builds.
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    for (table, dir) in [
        ("[[bench]]", "benches"),
        ("[[example]]", "examples"),
        ("[[bin]]", "src"),
    ] {
        if manifest.contains(table) {
            assert!(
                text.contains(&format!("COPY {dir} {dir}")),
                "Cargo.toml declares {table} but the build does not copy {dir}/"
            );
        }
    }
    assert!(
        text.contains(r#"CMD ["-c", "/etc/driftless/config/driftless.yaml", "run"]"#),
        "the chart mounts the config there"
    );
}
