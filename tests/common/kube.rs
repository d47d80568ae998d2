//! A real Kubernetes control plane for the tests: the `kube-apiserver` that `scripts/test` builds
//! from `k8s.io/kubernetes` (`KUBE_APISERVER_BIN`) over a real etcd 3.6 (`ETCD_BIN`), both on
//! loopback, started the way controller-runtime's envtest starts them
//! (`pkg/internal/testing/controlplane/apiserver.go`): certificates in a temporary folder, a
//! secure port on 127.0.0.1, a service cluster IP range, a service-account issuer and signing
//! key, RBAC on, and an admin user authenticated by a client certificate in the
//! `system:masters` group. No controller manager runs: nothing moves a Deployment's status
//! unless a test writes it.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::etcd::EtcdServer;
use super::pki::Pki;

/// One `kube-apiserver` and its etcd, stopped (SIGKILL) on drop.
pub struct ControlPlane {
    /// The API server's base URL, `https://127.0.0.1:<port>`.
    pub url: String,
    /// A kubeconfig for the admin user (context `test`), as `kubectl` and kube-rs read it.
    pub kubeconfig: PathBuf,
    dir: tempfile::TempDir,
    apiserver: Option<Child>,
    _etcd: EtcdServer,
}

impl ControlPlane {
    /// Starts etcd and the API server and waits until `/readyz` answers `ok` to the admin
    /// (at most 120 s; the first start on a cold machine spends most of it bootstrapping RBAC).
    pub async fn start() -> Self {
        let etcd = EtcdServer::start();
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::new(dir.path());
        let (serving_cert, serving_key) = pki.server("apiserver");
        let (admin_cert, admin_key) = pki.client("admin", "/O=system:masters/CN=driftless-admin");
        let (sa_key, sa_pub) = pki.key_pair("service-account");
        let port = super::free_port();
        let url = format!("https://127.0.0.1:{port}");
        let log = std::fs::File::create(dir.path().join("kube-apiserver.log")).unwrap();
        let bin = super::tool("KUBE_APISERVER_BIN", "kube-apiserver");
        let child = Command::new(&bin)
            .arg(format!("--etcd-servers={}", etcd.endpoint()))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            // No kubernetes.default endpoints: its address would be loopback, which the
            // endpoint reconciler refuses.
            .arg("--endpoint-reconciler-type=none")
            .arg(format!("--secure-port={port}"))
            .arg(format!("--cert-dir={}", dir.path().display()))
            .arg(format!("--tls-cert-file={}", serving_cert.display()))
            .arg(format!("--tls-private-key-file={}", serving_key.display()))
            .arg(format!("--client-ca-file={}", pki.ca().display()))
            .arg("--authorization-mode=RBAC")
            .arg("--service-cluster-ip-range=10.0.0.0/24")
            .arg(format!("--service-account-issuer={url}"))
            .arg(format!("--service-account-key-file={}", sa_pub.display()))
            .arg(format!(
                "--service-account-signing-key-file={}",
                sa_key.display()
            ))
            .arg("--allow-privileged=true")
            // No controller manager makes the default ServiceAccount, as in envtest.
            .arg("--disable-admission-plugins=ServiceAccount")
            .arg("--profiling=false")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{bin} starts: {e}"));
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: test\n\
                 clusters:\n- name: test\n  cluster:\n    server: {url}\n    certificate-authority: {}\n\
                 users:\n- name: admin\n  user:\n    client-certificate: {}\n    client-key: {}\n\
                 contexts:\n- name: test\n  context:\n    cluster: test\n    user: admin\n",
                pki.ca().display(),
                admin_cert.display(),
                admin_key.display()
            ),
        )
        .unwrap();
        let mut cp = ControlPlane {
            url,
            kubeconfig,
            dir,
            apiserver: Some(child),
            _etcd: etcd,
        };
        cp.wait_ready().await;
        cp
    }

    /// A kube-rs client for the admin user, read from [`ControlPlane::kubeconfig`].
    pub async fn client(&self) -> kube::Client {
        client_from(&self.kubeconfig).await
    }

    /// The API server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("kube-apiserver.log")).unwrap_or_default()
    }

    async fn wait_ready(&mut self) {
        let client = self.client().await;
        let start = Instant::now();
        loop {
            let req = http::Request::get("/readyz").body(Vec::new()).unwrap();
            let last = match client.request_text(req).await {
                Ok(body) if body.trim() == "ok" => return,
                Ok(body) => body,
                Err(e) => e.to_string(),
            };
            if let Some(c) = &mut self.apiserver
                && let Ok(Some(status)) = c.try_wait()
            {
                panic!("kube-apiserver exited with {status}:\n{}", self.log());
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "kube-apiserver not ready within 120 s ({last}):\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// A kube-rs client for the current context of a kubeconfig file.
pub async fn client_from(kubeconfig: &std::path::Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    kube::Client::try_from(config).unwrap()
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Some(mut c) = self.apiserver.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
