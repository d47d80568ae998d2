//! Helpers shared by the integration tests: real Git repositories made with the `git` command.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A Git repository in a temporary folder, driven with the real `git` command.
pub struct GitRepo {
    pub dir: tempfile::TempDir,
}

impl GitRepo {
    /// `git init -b main` in a new temporary folder.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = GitRepo { dir };
        repo.git(&["init", "-q", "-b", "main"]);
        repo
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The repository as a URL string for configs (a plain local path).
    pub fn url(&self) -> String {
        self.path().display().to_string()
    }

    /// Runs git in the repository; panics with its output when it fails.
    pub fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=Test",
                "-c",
                "user.email=test@example.com",
                "-c",
                "commit.gpgsign=false",
                "-c",
                "core.symlinks=true",
            ])
            .args(args)
            .current_dir(self.path())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .expect("git runs");
        assert!(
            out.status.success(),
            "git {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Writes a file (creating folders).
    pub fn write(&self, rel: &str, contents: impl AsRef<[u8]>) -> &Self {
        let p = self.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, contents).unwrap();
        self
    }

    /// Creates a symlink `rel` → `target` (target as written in the link).
    pub fn symlink(&self, rel: &str, target: &str) -> &Self {
        let p = self.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, p).unwrap();
        self
    }

    pub fn remove(&self, rel: &str) -> &Self {
        self.git(&["rm", "-q", "-r", rel]);
        self
    }

    /// Commits everything; returns the commit id.
    pub fn commit(&self, message: &str) -> String {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "--allow-empty", "-m", message]);
        self.head()
    }

    pub fn head(&self) -> String {
        self.git(&["rev-parse", "HEAD"])
    }
}

/// A ConfigMap manifest.
pub fn configmap(name: &str, data: &[(&str, &str)]) -> String {
    let mut s = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n");
    for (k, v) in data {
        s.push_str(&format!("  {k}: \"{v}\"\n"));
    }
    if data.is_empty() {
        s.push_str("  {}\n");
    }
    s
}

/// The folder holding the corpus and conformance data (copies of the shared test data,
/// see `tests/data/README.md`).
pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// A smart-HTTP Git server (`git http-backend` behind `tests/support/git_http_server.py`) on
/// loopback, serving bare copies of test repositories, over TLS with a self-signed certificate.
pub struct HttpsGitServer {
    pub root: tempfile::TempDir,
    pub port: u16,
    /// The server's certificate (PEM), to trust through `SSL_CERT_FILE`.
    pub cert: PathBuf,
    child: std::process::Child,
}

impl HttpsGitServer {
    /// Starts the server.
    pub fn start() -> Self {
        let root = tempfile::tempdir().unwrap();
        let cert = root.path().join("cert.pem");
        let key = root.path().join("key.pem");
        let out = Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=127.0.0.1",
            ])
            .args(["-addext", "subjectAltName=IP:127.0.0.1"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/git_http_server.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg("--root")
            .arg(root.path())
            .arg("--cert")
            .arg(&cert)
            .arg("--key")
            .arg(&key)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("the server prints its port");
        HttpsGitServer {
            root,
            port,
            cert,
            child,
        }
    }

    /// Publishes `repo` as `<name>.git` (a bare clone) and returns its https URL.
    pub fn publish(&self, repo: &GitRepo, name: &str) -> String {
        let dest = self.root.path().join(format!("{name}.git"));
        repo.git(&["clone", "-q", "--bare", ".", dest.to_str().unwrap()]);
        format!("https://127.0.0.1:{}/{name}.git", self.port)
    }

    /// Pushes `repo`'s main branch to the published copy.
    pub fn update(&self, repo: &GitRepo, name: &str) {
        let dest = self.root.path().join(format!("{name}.git"));
        repo.git(&["push", "-q", "--force", dest.to_str().unwrap(), "main"]);
    }
}

impl Drop for HttpsGitServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
