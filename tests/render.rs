//! Kustomize overlays and Helm charts end to end, with the real `kustomize` and `helm` (built
//! by `scripts/test` from `tools/`): the Flux example's overlays, a chart made with `helm
//! create` (in the repository and served by a chart repository on loopback), references that
//! escape or reach the network, renderers that are missing, fail or hang, and the render cache.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{Env, GitRepo, HttpsGitServer, configmap, env_for, stderr, stdout, sync_ok, tool};
use serde_json::Value;

fn kustomize() -> String {
    tool("KUSTOMIZE_BIN", "kustomize")
}

fn helm() -> String {
    tool("HELM_BIN", "helm")
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("runs");
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        stdout(&out),
        stderr(&out)
    );
    out
}

/// `(apiVersion kind namespace/name)` for an object.
fn key(o: &Value) -> String {
    format!(
        "{} {} {}/{}",
        o["apiVersion"].as_str().unwrap_or_default(),
        o["kind"].as_str().unwrap_or_default(),
        o["metadata"]["namespace"].as_str().unwrap_or_default(),
        o["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// The objects of a YAML stream (what `kustomize build` or `helm template` printed), read
/// independently of driftless's own reader, by key. Objects without a namespace get
/// `namespace` unless their kind is cluster-scoped in `cluster_scoped`.
fn objects_of(yaml: &str, namespace: &str, cluster_scoped: &[&str]) -> BTreeMap<String, Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .unwrap()
        .into_iter()
        .filter(|v| v.is_object())
        .map(|mut v| {
            let kind = v["kind"].as_str().unwrap_or_default().to_string();
            if v["metadata"]["namespace"].is_null() && !cluster_scoped.contains(&kind.as_str()) {
                v["metadata"]["namespace"] = Value::from(namespace);
            }
            (key(&v), v)
        })
        .collect()
}

/// What the store holds, without what the store sets (resourceVersion, generation,
/// creationTimestamp), by key.
fn stored(env: &Env) -> BTreeMap<String, Value> {
    let out = env.run(&["store", "list", "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .cloned()
        .map(|mut o| {
            let meta = o["metadata"].as_object_mut().unwrap();
            for k in ["resourceVersion", "generation", "creationTimestamp"] {
                meta.remove(k);
            }
            (key(&o), o)
        })
        .collect()
}

/// A new repository holding the Flux example at its root.
fn flux_repo() -> GitRepo {
    let repo = GitRepo::new();
    let src = common::data_dir().join("corpus/flux2-kustomize-helm-example");
    for entry in std::fs::read_dir(&src).unwrap() {
        let p = entry.unwrap().path();
        run(Command::new("cp").arg("-r").arg(&p).arg(repo.path()));
    }
    repo.commit("the flux2-kustomize-helm-example");
    repo
}

/// An ordinary checkout of `repo`'s HEAD beside it (`git worktree add`), to run the renderers
/// on as a user would.
fn checkout(repo: &GitRepo) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let wt = dir.path().join("checkout");
    repo.git(&[
        "worktree",
        "add",
        "-q",
        "--detach",
        wt.to_str().unwrap(),
        "HEAD",
    ]);
    (dir, wt)
}

/// The condition of type `t` in the app's status.
fn condition(env: &Env, t: &str) -> Value {
    env.status()["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == t)
        .cloned()
        .unwrap_or(Value::Null)
}

#[test]
fn the_flux_example_overlays_sync_to_what_kustomize_prints_on_a_checkout() {
    let repo = flux_repo();
    let (_dir, wt) = checkout(&repo);
    for overlay in [
        "apps/staging",
        "apps/production",
        "infrastructure/controllers",
        "infrastructure/configs",
    ] {
        let out = run(Command::new(kustomize()).arg("build").arg(wt.join(overlay)));
        let expected = objects_of(
            &stdout(&out),
            "default",
            &["Namespace", "ClusterIssuer", "GatewayClass"],
        );
        assert!(!expected.is_empty(), "{overlay}");
        let env = env_for(&repo.url(), overlay);
        sync_ok(&env);
        assert_eq!(stored(&env), expected, "{overlay}");
        let status = env.status();
        assert_eq!(status["sync"], "Synced", "{overlay}");
        assert!(
            status["diagnostics"].as_array().unwrap().is_empty(),
            "{status}"
        );
    }
    // The staging overlay's patch reached the base's HelmRelease (before rendering existed the
    // fragment became an object of its own and the base was ignored).
    let env = env_for(&repo.url(), "apps/staging");
    sync_ok(&env);
    let out = env.run(&[
        "store",
        "get",
        "helmrelease.helm.toolkit.fluxcd.io",
        "podinfo",
        "-n",
        "podinfo",
        "-o",
        "json",
    ]);
    let hr: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        hr["spec"]["values"]["httpRoute"]["hostnames"],
        serde_json::json!(["podinfo.staging"])
    );
    assert_eq!(
        hr["spec"]["values"]["redis"]["enabled"], true,
        "the base's values kept"
    );
    // A Flux cluster folder: plain manifests beside a folder with a kustomization file, which
    // is built, not read file by file (as Flux builds a path without a kustomization.yaml).
    let env = env_for(&repo.url(), "clusters/staging");
    sync_ok(&env);
    let names: Vec<String> = stored(&env).into_keys().collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(
        names
            .iter()
            .any(|k| k.contains("Kustomization flux-system/apps"))
    );
}

#[test]
fn diff_validate_and_a_dry_run_render_the_overlay() {
    let repo = flux_repo();
    let env = env_for(&repo.url(), "apps/staging");
    // diff before anything is applied: the rendered objects, the patch applied.
    let out = env.run(&["diff"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("HelmRelease.helm.toolkit.fluxcd.io podinfo/podinfo"),
        "{text}"
    );
    assert!(text.contains("podinfo.staging"), "{text}");
    let out = env.run(&["sync", "--dry-run"]);
    assert!(stdout(&out).contains("podinfo.staging"), "{}", stdout(&out));
    assert!(
        env.get("namespace", "podinfo").is_none(),
        "a dry run writes nothing"
    );
    // validate of the overlay folder renders it; of the whole example, each overlay alone.
    let (_dir, wt) = checkout(&repo);
    let out = env.run(&["validate", wt.join("apps/staging").to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("1 file(s), 3 object(s)"),
        "{}",
        stderr(&out)
    );
    // Outside a Git work tree, the current directory stands for the repository.
    let loose = tempfile::tempdir().unwrap();
    run(Command::new("cp")
        .arg("-r")
        .arg(wt.join("apps"))
        .arg(loose.path()));
    let out = Command::new(env!("CARGO_BIN_EXE_driftless"))
        .args(["validate", "apps/staging"])
        .current_dir(loose.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(stderr(&out).contains("3 object(s)"), "{}", stderr(&out));
    // A broken reference in a checkout is named as written, at its line.
    std::fs::write(
        wt.join("apps/staging/kustomization.yaml"),
        "resources:\n  - ../base/missing\n",
    )
    .unwrap();
    let out = env.run(&["validate", wt.join("apps/staging").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains(
            "apps/staging/kustomization.yaml:2:5: error: `../base/missing` does not exist"
        ),
        "{}",
        stdout(&out)
    );
}

/// `helm create web` at `charts/web` in `repo`, with a CRD, a values file beside the chart and
/// one elsewhere in the repository.
fn chart_repo() -> GitRepo {
    let repo = GitRepo::new();
    std::fs::create_dir_all(repo.path().join("charts")).unwrap();
    run(Command::new(helm())
        .args(["create", "web"])
        .current_dir(repo.path().join("charts")));
    repo.write(
        "charts/web/crds/widgets.yaml",
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.example.com\nspec:\n  group: example.com\n  names: {kind: Widget, plural: widgets, singular: widget}\n  scope: Namespaced\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}\n",
    );
    repo.write("charts/web/values-prod.yaml", "replicaCount: 3\n");
    repo.write("values/shared.yaml", "service:\n  port: 8080\n");
    repo.commit("a chart");
    repo
}

#[test]
fn a_chart_in_the_repository_renders_as_helm_template_does_with_values_namespace_and_crds() {
    let repo = chart_repo();
    let (_dir, wt) = checkout(&repo);
    let env = env_for(&repo.url(), "charts/web");
    env.app_config(
        "      helm:\n        releaseName: shop\n        namespace: store\n        valuesFiles: [values-prod.yaml, ../../values/shared.yaml]\n        values: {podLabels: {tier: web}}\n",
    );
    sync_ok(&env);
    // What helm prints on a checkout with the same settings.
    let inline = _dir.path().join("inline.json");
    std::fs::write(&inline, r#"{"podLabels":{"tier":"web"}}"#).unwrap();
    let out = run(Command::new(helm())
        .args(["template", "shop", "charts/web", "--namespace", "store"])
        .args(["--include-crds", "--skip-tests"])
        .args([
            "--values",
            "charts/web/values-prod.yaml",
            "--values",
            "values/shared.yaml",
        ])
        .arg("--values")
        .arg(&inline)
        .current_dir(&wt));
    let expected = objects_of(&stdout(&out), "store", &["CustomResourceDefinition"]);
    let got = stored(&env);
    assert_eq!(got, expected);
    let deploy = &got["apps/v1 Deployment store/shop-web"];
    assert_eq!(deploy["spec"]["replicas"], 3, "values-prod.yaml");
    assert_eq!(
        deploy["spec"]["template"]["metadata"]["labels"]["tier"], "web",
        "inline values"
    );
    assert_eq!(
        got["v1 Service store/shop-web"]["spec"]["ports"][0]["port"], 8080,
        "a values file elsewhere in the repository"
    );
    assert!(
        got.contains_key("apiextensions.k8s.io/v1 CustomResourceDefinition /widgets.example.com")
    );
    assert!(
        !got.keys().any(|k| k.contains("test-connection")),
        "tests are skipped: {got:?}"
    );
    // Diagnostics name the template: a label that is a number in the rendered output.
    repo.write(
        "charts/web/templates/bad.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\n  labels:\n    n: {{ .Values.replicaCount }}\n",
    );
    repo.commit("a template that renders a number as a label");
    let out = env.run(&["sync"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(
            "charts/web/templates/bad.yaml:7:8: error: value of label `n` must be a string"
        ) && stderr(&out).contains("(in the output of `helm template shop charts/web`)"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        stored(&env),
        expected,
        "nothing of the bad revision applied"
    );
    // Without CRDs and with the chart's tests.
    let env2 = env_for(&repo.url(), "charts/web");
    repo.remove("charts/web/templates/bad.yaml");
    repo.commit("fixed");
    env2.app_config("      helm: {includeCRDs: false, skipTests: false}\n");
    sync_ok(&env2);
    let got = stored(&env2);
    assert!(
        !got.keys().any(|k| k.contains("CustomResourceDefinition")),
        "{got:?}"
    );
    assert!(
        got.contains_key("v1 Pod default/demo-web-test-connection"),
        "{got:?}"
    );
    // A Chart.yaml at the path is a chart without `source.helm` too: release = app name.
    let env3 = env_for(&repo.url(), "charts/web");
    sync_ok(&env3);
    assert!(stored(&env3).contains_key("apps/v1 Deployment default/demo-web"));
    // `validate` reads folders as the agent reads an app's path: the chart's own folder is
    // rendered, a folder holding it is refused.
    let out = env3.run(&["validate", wt.join("charts/web").to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let out = env3.run(&["validate", wt.join("charts").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains(
            "charts/web/Chart.yaml:1:1: error: a Helm chart inside the folder is not rendered"
        ),
        "{}",
        stdout(&out)
    );
    // `source.kustomize` on a chart's folder says what is missing.
    let env4 = env_for(&repo.url(), "charts/web");
    env4.app_config("      kustomize: {}\n");
    let out = env4.run(&["sync"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out)
            .contains("`source.kustomize` is set, but the app's path holds no kustomization file")
            && !stderr(&out).contains("inside the app's path"),
        "{}",
        stderr(&out)
    );
}

/// A chart repository on loopback: `python3 -m http.server` over a folder, its requests logged.
struct ChartServer {
    dir: tempfile::TempDir,
    port: u16,
    child: std::process::Child,
}

impl ChartServer {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = common::free_port();
        std::fs::create_dir_all(dir.path().join("www")).unwrap();
        let log = std::fs::File::create(dir.path().join("requests.log")).unwrap();
        let child = Command::new("python3")
            .args([
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                &port.to_string(),
            ])
            .arg("--directory")
            .arg(dir.path().join("www"))
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        common::wait_for("the chart repository", Duration::from_secs(20), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        ChartServer { dir, port, child }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn www(&self) -> PathBuf {
        self.dir.path().join("www")
    }

    /// Packages the chart folder `chart` at `version` into the repository and indexes it.
    fn publish(&self, chart: &Path, version: &str) {
        let text = std::fs::read_to_string(chart.join("Chart.yaml")).unwrap();
        let text: String = text
            .lines()
            .map(|l| {
                if l.starts_with("version:") {
                    format!("version: {version}\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        std::fs::write(chart.join("Chart.yaml"), text).unwrap();
        run(Command::new(helm())
            .arg("package")
            .arg(chart)
            .arg("--destination")
            .arg(self.www()));
        run(Command::new(helm())
            .args(["repo", "index"])
            .arg(self.www())
            .args(["--url", &self.url()]));
    }

    fn requests(&self, part: &str) -> usize {
        std::fs::read_to_string(self.dir.path().join("requests.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(part))
            .count()
    }
}

impl Drop for ChartServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_chart_from_a_chart_repository_is_fetched_by_version_pinned_and_a_rewritten_release_refused() {
    let server = ChartServer::start();
    let work = tempfile::tempdir().unwrap();
    run(Command::new(helm())
        .args(["create", "web"])
        .current_dir(work.path()));
    let chart = work.path().join("web");
    server.publish(&chart, "0.1.0");
    server.publish(&chart, "0.2.0");
    // The app's repository holds only its values.
    let repo = GitRepo::new();
    repo.write("deploy/values.yaml", "replicaCount: 2\n");
    repo.commit("values");
    let env = env_for(&repo.url(), "deploy");
    // Run as a user in the config's folder would (`-c driftless.yaml`, `cacheDir: cache`, the
    // renderer at a path relative to the config): the renderer runs in a folder of its own, so
    // every path it is given must still name the same file. Detect-only: a new chart version
    // under the same commit is still applied, as a new revision.
    std::os::unix::fs::symlink(helm(), env.dir.path().join("helm-here")).unwrap();
    let app = |version: &str| {
        format!(
            "      helm:\n        releaseName: shop\n        valuesFiles: [values.yaml]\n        values: {{podLabels: {{tier: edge}}}}\n        chart: {{repository: \"{}\", name: web, version: \"{version}\"}}\n    sync: {{selfHeal: false}}\n",
            server.url()
        )
    };
    let base_config = format!(
        "renderers: {{helm: helm-here}}\n{}",
        std::fs::read_to_string(env.config()).unwrap()
    );
    let sync_ok = |env: &Env| {
        let out = Command::new(env!("CARGO_BIN_EXE_driftless"))
            .args(["-c", "driftless.yaml", "sync"])
            .current_dir(env.dir.path())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}{}",
            stdout(&out),
            stderr(&out)
        );
    };
    std::fs::write(env.config(), base_config.clone() + &app(">=0.1.0 <0.2.0")).unwrap();
    sync_ok(&env);
    let deploy = env
        .get("deployment", "shop-web")
        .expect("the chart's Deployment");
    assert_eq!(
        deploy["spec"]["template"]["metadata"]["labels"]["tier"], "edge",
        "inline values"
    );
    assert_eq!(
        deploy["metadata"]["labels"]["helm.sh/chart"], "web-0.1.0",
        "the range's newest match"
    );
    assert_eq!(
        deploy["spec"]["replicas"], 2,
        "values from the Git repository"
    );
    // Pinned in the cache: a second sync reads the index again but not the archive.
    sync_ok(&env);
    assert_eq!(server.requests("GET /web-0.1.0.tgz"), 1);
    assert_eq!(server.requests("GET /index.yaml"), 2);
    // The repository rewrites release 0.1.0 (same version, other contents): refused, and the
    // objects as applied stay.
    std::fs::write(chart.join("values.yaml"), "replicaCount: 7\nimage: {repository: nginx}\nservice: {type: ClusterIP, port: 80}\nserviceAccount: {create: true}\ningress: {enabled: false}\nhttpRoute: {enabled: false}\nautoscaling: {enabled: false}\n").unwrap();
    std::fs::remove_file(server.www().join("web-0.1.0.tgz")).unwrap();
    server.publish(&chart, "0.1.0");
    let out = env.run(&["sync"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let source = condition(&env, "SourceAvailable");
    assert_eq!(source["status"], "False");
    assert_eq!(source["reason"], "ChartDigestChanged", "{source}");
    assert!(
        source["message"]
            .as_str()
            .unwrap()
            .contains("chart `web` 0.1.0 changed: its digest was"),
        "{source}"
    );
    let deploy = env.get("deployment", "shop-web").unwrap();
    assert_eq!(deploy["metadata"]["labels"]["helm.sh/chart"], "web-0.1.0");
    assert_eq!(
        deploy["spec"]["replicas"], 2,
        "the pinned chart stays in force"
    );
    // The pin is kept with what was applied, in the store: it outlives the chart cache (an
    // emptyDir, a new replica).
    std::fs::remove_dir_all(env.dir.path().join("cache")).unwrap();
    let out = env.run(&["sync"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        condition(&env, "SourceAvailable")["reason"],
        "ChartDigestChanged"
    );
    assert_eq!(
        env.get("deployment", "shop-web").unwrap()["spec"]["replicas"],
        2
    );
    // A new version is taken: `0.x` now resolves to 0.2.0.
    std::fs::write(env.config(), base_config + &app("0.x")).unwrap();
    sync_ok(&env);
    let deploy = env.get("deployment", "shop-web").unwrap();
    assert_eq!(deploy["metadata"]["labels"]["helm.sh/chart"], "web-0.2.0");
    let source = condition(&env, "SourceAvailable");
    assert!(
        source["message"]
            .as_str()
            .unwrap()
            .contains("; chart web 0.2.0 (sha256 "),
        "the chart in use is named: {source}"
    );
    // A version the index does not have names the newest there is.
    let env2 = env_for(&repo.url(), "deploy");
    env2.app_config(&app("9.9.9"));
    let out = env2.run(&["sync"]);
    assert_eq!(out.status.code(), Some(1));
    let source = condition(&env2, "SourceAvailable");
    assert_eq!(source["reason"], "ChartUnavailable", "{source}");
    assert!(
        source["message"]
            .as_str()
            .unwrap()
            .contains("no version of chart `web` matches `9.9.9`"),
        "{source}"
    );
}

/// A `kustomize` that records each run in `calls` before running the real one.
fn recording_kustomize(dir: &Path) -> (PathBuf, PathBuf) {
    let calls = dir.join("kustomize-calls.log");
    let script = dir.join("kustomize-recording.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\nexec '{}' \"$@\"\n",
            calls.display(),
            kustomize()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (script, calls)
}

fn with_renderers(env: &Env, block: &str) {
    let config = std::fs::read_to_string(env.config()).unwrap();
    std::fs::write(env.config(), format!("{block}{config}")).unwrap();
}

#[test]
fn remote_bases_and_references_out_of_the_repository_are_refused_before_kustomize_runs() {
    // A real Git server on loopback, with a base kustomize could fetch.
    let server = HttpsGitServer::start_with(false, None);
    let base = GitRepo::new();
    base.write("base/kustomization.yaml", "resources: [cm.yaml]\n");
    base.write("base/cm.yaml", configmap("remote", &[("k", "1")]));
    base.commit("a base");
    let base_url = server.publish(&base, "base");
    assert!(server.requests().is_empty());
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(
        outside.path().join("kustomization.yaml"),
        "resources: [cm.yaml]\n",
    )
    .unwrap();
    std::fs::write(
        outside.path().join("cm.yaml"),
        configmap("stolen", &[("k", "1")]),
    )
    .unwrap();
    let repo = GitRepo::new();
    repo.write("app/kustomization.yaml", "resources: [cm.yaml]\n");
    repo.write("app/cm.yaml", configmap("a", &[("k", "1")]));
    repo.commit("a plain overlay");
    let env = env_for(&repo.url(), "app");
    let (script, calls) = recording_kustomize(env.dir.path());
    with_renderers(
        &env,
        &format!("renderers: {{kustomize: {}}}\n", script.display()),
    );
    sync_ok(&env);
    assert_eq!(
        std::fs::read_to_string(&calls).unwrap().lines().count(),
        1,
        "the recorder runs kustomize"
    );
    std::fs::remove_file(&calls).unwrap();
    let port = server.port;
    let cases: Vec<(String, String)> = vec![
        (
            format!("{base_url}//base?ref=main"),
            "remote base".to_string(),
        ),
        (
            format!("127.0.0.1:{port}/base.git//base?ref=main"),
            "remote base".into(),
        ),
        (
            "github.com/acme/bases/web?ref=v1".into(),
            "remote base".into(),
        ),
        (
            outside.path().display().to_string(),
            "is an absolute path".into(),
        ),
        (
            "../../../../../../../../tmp".into(),
            "leads outside the repository".into(),
        ),
        (
            "escape".into(),
            "leads outside the repository through the symlink".into(),
        ),
    ];
    for (reference, why) in &cases {
        repo.write(
            "app/kustomization.yaml",
            format!("resources:\n- cm.yaml\n- {reference}\n"),
        );
        if reference == "escape" {
            repo.symlink("app/escape", outside.path().to_str().unwrap());
        }
        repo.write("app/cm.yaml", configmap("a", &[("k", "2")]));
        repo.commit(&format!("references {reference}"));
        let out = env.run(&["sync"]);
        assert_eq!(out.status.code(), Some(1), "{reference}");
        let err = stderr(&out);
        assert!(
            err.contains("app/kustomization.yaml:3:3: error: ")
                && err.contains(why.as_str())
                && err.contains("nothing applied"),
            "{reference}: {err}"
        );
        assert_eq!(
            env.get("configmap", "a").unwrap()["data"]["k"],
            "1",
            "{reference}: nothing applied"
        );
        assert!(
            env.get("configmap", "stolen").is_none() && env.get("configmap", "remote").is_none()
        );
        let diagnostics = env.status()["diagnostics"].clone();
        assert!(
            diagnostics.to_string().contains(why.as_str()),
            "{diagnostics}"
        );
    }
    // kustomize reads field names ignoring case (`Resources`, `reſources`): such a spelling,
    // which the walk would not read, is refused too.
    for key in ["Resources", "re\u{17f}ources"] {
        repo.write(
            "app/kustomization.yaml",
            format!(
                "resources: [cm.yaml]\n{key}: [\"{base_url}//base?ref=main\", {}]\n",
                outside.path().display()
            ),
        );
        repo.commit(&format!("a reference under {key}"));
        let out = env.run(&["sync"]);
        assert_eq!(out.status.code(), Some(1), "{key}");
        assert!(
            stderr(&out).contains(&format!(
                "app/kustomization.yaml:2:1: error: `{key}` is read by kustomize as `resources`"
            )),
            "{key}: {}",
            stderr(&out)
        );
    }
    assert!(
        !calls.exists(),
        "kustomize never ran: {:?}",
        std::fs::read_to_string(&calls)
    );
    assert!(
        server.requests().is_empty(),
        "the Git server saw: {:?}",
        server.requests()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_failing_or_hanging_renderer_keeps_the_last_good_revision_and_posts_an_error() {
    let github = common::github_status_host().await;
    let repo = GitRepo::new();
    repo.write("app/kustomization.yaml", "resources: [cm.yaml]\n");
    repo.write("app/cm.yaml", configmap("a", &[("k", "1")]));
    let good = repo.commit("good");
    let env = env_for(&repo.url(), "app");
    env.app_config(&format!(
        "    status: {{provider: github, apiUrl: \"{}\", repository: acme/web, token: {{env: DRIFTLESS_TEST_GH_TOKEN}}}}\n",
        github.uri()
    ));
    let config = std::fs::read_to_string(env.config()).unwrap();
    let sync = |renderers: &str, timeout: &str| {
        std::fs::write(
            env.config(),
            format!(
                "{renderers}{}",
                config.replace(
                    "      interval: 1h\n",
                    &format!("      interval: 1h\n      renderTimeout: {timeout}\n")
                )
            ),
        )
        .unwrap();
        env.cmd()
            .arg("sync")
            .env("DRIFTLESS_TEST_GH_TOKEN", "t")
            .output()
            .unwrap()
    };
    let out = sync("", "60s");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let posted = || common::posted_statuses(&github);
    let script = env.dir.path().join("hang.sh");
    std::fs::write(&script, "#!/bin/sh\n/bin/sleep 613\necho never\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let missing = "renderers: {kustomize: /nonexistent/kustomize}\n".to_string();
    let hanging = format!("renderers: {{kustomize: {}}}\n", script.display());
    let cases = [
        (
            missing.as_str(),
            "cm.yaml",
            "kustomize is not installed: cannot run /nonexistent/kustomize",
        ),
        (
            "",
            "patch",
            "`kustomize build app` failed: no resource matches strategic merge patch \"Deployment.v1.apps/nothing.[noNs]\"",
        ),
        (
            hanging.as_str(),
            "cm.yaml",
            "`kustomize build app` did not finish within 2 s (source.renderTimeout); killed",
        ),
    ];
    for (n, (renderers, change, message)) in cases.iter().enumerate() {
        if *change == "patch" {
            repo.write(
                "app/kustomization.yaml",
                "resources: [cm.yaml]\npatches:\n- patch: '{\"apiVersion\": \"apps/v1\", \"kind\": \"Deployment\", \"metadata\": {\"name\": \"nothing\"}, \"spec\": {\"replicas\": 2}}'\n",
            );
        }
        repo.write(
            "app/cm.yaml",
            configmap("a", &[("k", &format!("{}", n + 2))]),
        );
        let bad = repo.commit(&format!("case {n}"));
        let started = std::time::Instant::now();
        let out = sync(renderers, "2s");
        assert_eq!(out.status.code(), Some(1), "{message}: {}", stderr(&out));
        assert!(started.elapsed() < Duration::from_secs(30), "{message}");
        let source = condition(&env, "SourceAvailable");
        assert_eq!(source["status"], "False", "{source}");
        assert_eq!(source["reason"], "RenderFailed", "{source}");
        assert!(
            source["message"].as_str().unwrap().contains(message),
            "{source}"
        );
        let status = env.status();
        assert_eq!(
            status["revision"],
            good.as_str(),
            "the last good revision stays in force"
        );
        assert_eq!(status["lastAttemptedRevision"], bad.as_str());
        assert_eq!(
            env.get("configmap", "a").unwrap()["data"]["k"],
            "1",
            "nothing applied"
        );
        let on_bad: Vec<Value> = posted()
            .await
            .into_iter()
            .filter(|(s, _)| *s == bad)
            .map(|(_, b)| b)
            .collect();
        assert_eq!(on_bad.len(), 1, "{on_bad:?}");
        assert_eq!(on_bad[0]["state"], "error");
        assert!(
            on_bad[0]["description"]
                .as_str()
                .unwrap()
                .starts_with("render failed: "),
            "{on_bad:?}"
        );
        // The commit in force keeps its success.
        assert!(
            posted()
                .await
                .iter()
                .filter(|(s, _)| *s == good)
                .all(|(_, b)| b["state"] == "success")
        );
        if *change == "patch" {
            repo.write("app/kustomization.yaml", "resources: [cm.yaml]\n");
        }
    }
    // The hung renderer and its child were killed with their process group.
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains("sleep 613"))
        .collect();
    assert!(left.is_empty(), "left running: {left:?}");
    // With the renderer back, the newest revision is applied.
    let out = sync("", "60s");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(env.get("configmap", "a").unwrap()["data"]["k"], "4");
}

/// The counter `driftless_renders_total` for an app and a result, from the agent's metrics.
async fn renders(addr: &str, app: &str, result: &str) -> f64 {
    let text = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let series = format!(
        "driftless_renders_total{{app=\"{app}\",renderer=\"kustomize\",result=\"{result}\"}}"
    );
    text.lines()
        .find_map(|l| l.strip_prefix(&series).map(|v| v.trim().parse().unwrap()))
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_render_cache_renders_nothing_for_a_commit_elsewhere_and_each_app_once_for_a_shared_base()
 {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let repo = GitRepo::new();
    repo.write("base/kustomization.yaml", "resources: [cm.yaml]\n");
    repo.write("base/cm.yaml", configmap("shared", &[("k", "1")]));
    let apps = ["one", "two", "three"];
    for a in apps {
        repo.write(
            &format!("apps/{a}/kustomization.yaml"),
            format!("namespace: {a}\nresources: [../../base]\n"),
        );
    }
    repo.write("docs/README.md", "docs\n");
    repo.commit("three overlays of one base");
    let env = Env::new();
    let mut config = "store:\n  sqlite: {path: store.db}\ncacheDir: cache\nserver: {listen: \"127.0.0.1:0\"}\napps:\n".to_string();
    for a in apps {
        config.push_str(&format!(
            "  - name: {a}\n    source: {{repo: \"{}\", path: apps/{a}, interval: 1s}}\n",
            repo.url()
        ));
    }
    std::fs::write(env.config(), config).unwrap();
    let agent = env.agent();
    let addr = env.http_addr();
    let wait = |what: &'static str, f: &dyn Fn(&Value) -> bool| {
        env.wait(what, Duration::from_secs(60), || {
            let out = env.run(&["status", "-o", "json"]);
            let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            v["apps"]
                .as_array()
                .is_some_and(|a| a.len() == 3 && a.iter().all(f))
        })
    };
    wait("three apps synced", &|a| a["sync"] == "Synced");
    for a in apps {
        assert_eq!(renders(&addr, a, "rendered").await, 1.0, "{a}");
        assert!(
            env.run(&["store", "get", "configmap", "shared", "-n", a])
                .status
                .success()
        );
    }
    // No-op passes (every second) and a commit outside the apps' trees render nothing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let elsewhere = {
        repo.write("docs/README.md", "more docs\n");
        repo.commit("docs")
    };
    wait("the docs commit taken", &|a| {
        a["lastAttemptedRevision"] == elsewhere.as_str()
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    for a in apps {
        assert_eq!(
            renders(&addr, a, "rendered").await,
            1.0,
            "{a}: nothing rendered again"
        );
        assert_eq!(
            renders(&addr, a, "cached").await,
            1.0,
            "{a}: the docs commit's render is the one in force"
        );
    }
    // A commit to the shared base: each app renders once.
    repo.write("base/cm.yaml", configmap("shared", &[("k", "2")]));
    let changed = repo.commit("the base");
    wait("the base commit applied", &|a| {
        a["revision"] == changed.as_str() && a["sync"] == "Synced"
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    for a in apps {
        assert_eq!(renders(&addr, a, "rendered").await, 2.0, "{a}");
        let out = env.run(&["store", "get", "configmap", "shared", "-n", a, "-o", "json"]);
        let cm: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(cm["data"]["k"], "2");
    }
    let (code, log) = agent.stop();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn driftless_version_names_the_renderers_it_finds() {
    let env = Env::new();
    let out = env
        .cmd()
        .arg("version")
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(
        text.starts_with(&format!("driftless {}\n", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    assert!(
        text.contains("kustomize: not found: no `kustomize` on the PATH"),
        "{text}"
    );
    with_renderers(
        &env,
        &format!(
            "renderers: {{kustomize: {}, helm: {}}}\n",
            kustomize(),
            helm()
        ),
    );
    let out = env.run(&["version"]);
    let text = stdout(&out);
    assert!(
        text.contains(&format!("kustomize v5.8.2 ({})", kustomize())),
        "{text}"
    );
    assert!(
        text.contains(&format!("helm v4.3.2 ({})", helm())),
        "{text}"
    );
}

#[test]
fn a_renderers_error_never_shows_a_secret_value() {
    let repo = GitRepo::new();
    // kustomize quotes a secretGenerator literal it cannot read.
    repo.write(
        "app/kustomization.yaml",
        "secretGenerator:\n- name: s\n  literals: [\"SUPERSECRET-LITERAL-1234\"]\n",
    );
    // helm quotes a value a chart's schema refuses.
    std::fs::create_dir_all(repo.path().join("charts")).unwrap();
    run(Command::new(helm())
        .args(["create", "web"])
        .current_dir(repo.path().join("charts")));
    repo.write(
        "charts/web/values.schema.json",
        r#"{"properties": {"password": {"type": "string", "pattern": "^[a-z]+$"}}}"#,
    );
    repo.write("charts/web/prod.yaml", "password: FROM-A-VALUES-FILE-9\n");
    repo.commit("secrets");
    let kustomized = env_for(&repo.url(), "app");
    let inline = env_for(&repo.url(), "charts/web");
    inline.app_config("      helm: {values: {password: SUPERSECRET-SCHEMA-Pw1}}\n");
    let from_file = env_for(&repo.url(), "charts/web");
    from_file.app_config("      helm: {valuesFiles: [prod.yaml]}\n");
    for (env, secret) in [
        (&kustomized, "SUPERSECRET-LITERAL-1234"),
        (&inline, "SUPERSECRET-SCHEMA-Pw1"),
        (&from_file, "FROM-A-VALUES-FILE-9"),
    ] {
        let out = env.run(&["sync"]);
        assert_eq!(out.status.code(), Some(1), "{secret}");
        let source = condition(env, "SourceAvailable");
        assert_eq!(source["reason"], "RenderFailed", "{source}");
        let message = source["message"].as_str().unwrap();
        assert!(message.contains("(hidden)"), "{message}");
        for text in [message.to_string(), stderr(&out), env.status().to_string()] {
            assert!(!text.contains(secret), "{secret} shown: {text}");
        }
    }
}
