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
    /// The API server's flags but `--secure-port`, to start it again or start another.
    args: Vec<String>,
    port: u16,
    /// The CA and admin credentials, for the kubeconfig of another API server.
    credentials: (PathBuf, PathBuf, PathBuf),
    etcd: EtcdServer,
}

/// A second `kube-apiserver` on the same etcd ([`ControlPlane::second_apiserver`]), stopped
/// on drop.
pub struct SecondApiServer {
    /// A kubeconfig for it, as the admin.
    pub kubeconfig: PathBuf,
    child: Child,
}

impl Drop for SecondApiServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
        let args = vec![
            format!("--etcd-servers={}", etcd.endpoint()),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            // No kubernetes.default endpoints: its address would be loopback, which the
            // endpoint reconciler refuses.
            "--endpoint-reconciler-type=none".into(),
            format!("--cert-dir={}", dir.path().display()),
            format!("--tls-cert-file={}", serving_cert.display()),
            format!("--tls-private-key-file={}", serving_key.display()),
            format!("--client-ca-file={}", pki.ca().display()),
            "--authorization-mode=RBAC".into(),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            format!("--service-account-issuer={url}"),
            format!("--service-account-key-file={}", sa_pub.display()),
            format!("--service-account-signing-key-file={}", sa_key.display()),
            "--allow-privileged=true".into(),
            // No controller manager makes the default ServiceAccount, as in envtest.
            "--disable-admission-plugins=ServiceAccount".into(),
            "--profiling=false".into(),
        ];
        let kubeconfig = dir.path().join("kubeconfig");
        let credentials = (pki.ca(), admin_cert, admin_key);
        write_kubeconfig(&kubeconfig, &url, &credentials);
        let mut cp = ControlPlane {
            url,
            kubeconfig,
            dir,
            apiserver: None,
            args,
            port,
            credentials,
            etcd,
        };
        cp.start_apiserver().await;
        cp
    }

    fn spawn(&self, port: u16, log: &str) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(log))
            .unwrap();
        let bin = super::tool("KUBE_APISERVER_BIN", "kube-apiserver");
        Command::new(&bin)
            .args(&self.args)
            .arg(format!("--secure-port={port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{bin} starts: {e}"))
    }

    /// Starts the API server (again, after [`Self::stop_apiserver`]: same port, same etcd)
    /// and waits until it is ready.
    pub async fn start_apiserver(&mut self) {
        assert!(self.apiserver.is_none(), "the API server is running");
        self.apiserver = Some(self.spawn(self.port, "kube-apiserver.log"));
        self.wait_ready().await;
    }

    /// Stops the API server (SIGKILL, as a crash); etcd keeps running.
    pub fn stop_apiserver(&mut self) {
        if let Some(mut c) = self.apiserver.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The API server's address, `127.0.0.1:<port>`.
    pub fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// A kubeconfig for the admin user that reaches the API server through `addr` (a
    /// [`super::proxy::Proxy`] in front of it; the serving certificate names 127.0.0.1).
    pub fn kubeconfig_via(&self, addr: std::net::SocketAddr) -> PathBuf {
        let path = self.dir.path().join(format!("kubeconfig-{}", addr.port()));
        write_kubeconfig(&path, &format!("https://{addr}"), &self.credentials);
        path
    }

    /// Starts another API server on the same etcd, on its own port, ready when this returns:
    /// the way to change the cluster while the first one is down.
    pub async fn second_apiserver(&self) -> SecondApiServer {
        let port = super::free_port();
        let kubeconfig = self.dir.path().join("kubeconfig-second");
        write_kubeconfig(
            &kubeconfig,
            &format!("https://127.0.0.1:{port}"),
            &self.credentials,
        );
        let mut second = SecondApiServer {
            kubeconfig,
            child: self.spawn(port, "kube-apiserver-second.log"),
        };
        let client = client_from(&second.kubeconfig).await;
        let start = Instant::now();
        loop {
            let req = http::Request::get("/readyz").body(Vec::new()).unwrap();
            if matches!(client.request_text(req).await, Ok(body) if body.trim() == "ok") {
                return second;
            }
            if let Ok(Some(status)) = second.child.try_wait() {
                panic!("the second kube-apiserver exited with {status}");
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "second kube-apiserver not ready"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Compacts etcd's history up to its current revision (through etcd's JSON gateway), as
    /// the API server's own compaction does every 5 minutes; returns that revision.
    pub async fn compact_etcd(&self) -> u64 {
        let base = self.etcd.endpoint();
        let http = reqwest::Client::new();
        let range: serde_json::Value = http
            .post(format!("{base}/v3/kv/range"))
            .json(&serde_json::json!({"key": "Lw=="}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let revision: u64 = range["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("etcd's revision: {range}"));
        let compacted = http
            .post(format!("{base}/v3/kv/compaction"))
            .json(&serde_json::json!({"revision": revision.to_string(), "physical": true}))
            .send()
            .await
            .unwrap();
        assert!(
            compacted.status().is_success(),
            "{:?}",
            compacted.text().await
        );
        revision
    }

    /// The cluster's CA certificate (PEM), to trust the API server.
    pub fn ca(&self) -> &std::path::Path {
        &self.credentials.0
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

/// Writes a kubeconfig for the admin user of the API server at `url`.
fn write_kubeconfig(
    path: &std::path::Path,
    url: &str,
    (ca, cert, key): &(PathBuf, PathBuf, PathBuf),
) {
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: test\n\
             clusters:\n- name: test\n  cluster:\n    server: {url}\n    certificate-authority: {}\n\
             users:\n- name: admin\n  user:\n    client-certificate: {}\n    client-key: {}\n\
             contexts:\n- name: test\n  context:\n    cluster: test\n    user: admin\n",
            ca.display(),
            cert.display(),
            key.display()
        ),
    )
    .unwrap();
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Some(mut c) = self.apiserver.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
