//! Helpers shared by the integration tests: real Git repositories made with the `git` command.
#![allow(dead_code)]

pub mod comments;
#[cfg(any(feature = "etcd", feature = "kubernetes"))]
pub mod etcd;
#[cfg(feature = "kubernetes")]
pub mod kube;
pub mod objects;
pub mod pki;
#[cfg(feature = "kubernetes")]
pub mod proxy;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A program the tests need: the path in the environment variable `env` (which `scripts/test`
/// sets to the binary it built from the pinned Go modules under `tools/`), else `name` on the
/// PATH. Panics when there is neither: a missing tool fails the test, it never skips it.
pub fn tool(env: &str, name: &str) -> String {
    if let Some(b) = std::env::var_os(env).filter(|b| !b.is_empty()) {
        let b = PathBuf::from(b);
        assert!(b.is_file(), "{env}={} is not a file", b.display());
        return b.to_string_lossy().into_owned();
    }
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = Path::new(dir).join(name);
        if p.is_file() {
            return p.to_string_lossy().into_owned();
        }
    }
    panic!(
        "no `{name}`: run the tests through `scripts/test`, which builds it from tools/ and sets \
         {env}, or set {env} to a {name} binary"
    );
}

/// A loopback port free at the time of asking.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

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
        self.git_with_input(args, "")
    }

    /// Runs git with `input` on its standard input (`mktree`, `hash-object --stdin`).
    pub fn git_with_input(&self, args: &[&str], input: &str) -> String {
        use std::io::Write;
        let mut child = Command::new("git")
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
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("git runs");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().expect("git runs");
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

    /// Commits, on top of HEAD, a tree whose `app/` folder is a binary tree `levels` deep that
    /// lists one subtree twice per level over one small manifest: a few KB in Git, 2^levels
    /// files when walked. Moves the branch without touching the work tree; returns the commit.
    pub fn commit_tree_bomb(&self, levels: u32) -> String {
        let blob = self.git_with_input(&["hash-object", "-w", "--stdin"], "# nothing\n");
        let mut tree = self.git_with_input(&["mktree"], &format!("100644 blob {blob}\ta.yaml\n"));
        for _ in 0..levels {
            tree = self.git_with_input(
                &["mktree"],
                &format!("040000 tree {tree}\ta\n040000 tree {tree}\tb\n"),
            );
        }
        let root = self.git_with_input(&["mktree"], &format!("040000 tree {tree}\tapp\n"));
        let commit = self.git(&["commit-tree", &root, "-p", "HEAD", "-m", "bomb"]);
        self.git(&["update-ref", "HEAD", &commit]);
        commit
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
    tls: bool,
    child: std::process::Child,
}

impl HttpsGitServer {
    /// Starts the server.
    pub fn start() -> Self {
        Self::start_with(true, None)
    }

    /// Starts the server over TLS or plain HTTP, requiring HTTP Basic `(user, password)` when
    /// given.
    pub fn start_with(tls: bool, basic: Option<(&str, &str)>) -> Self {
        Self::start_full(tls, basic, None)
    }

    /// A plain HTTP server that answers every request with a redirect to `base`.
    pub fn redirecting_to(base: &str) -> Self {
        Self::start_full(false, None, Some(base))
    }

    fn start_full(tls: bool, basic: Option<(&str, &str)>, redirect: Option<&str>) -> Self {
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
            // A server's (leaf) certificate, trusted as itself: `req -x509` makes a CA
            // certificate by default, which rustls (webpki) refuses as a server's.
            .args(["-addext", "basicConstraints=critical,CA:FALSE"])
            .args(["-addext", "extendedKeyUsage=serverAuth"])
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
        let mut cmd = Command::new("python3");
        cmd.arg(script).arg("--root").arg(root.path());
        if tls {
            cmd.arg("--cert").arg(&cert).arg("--key").arg(&key);
        }
        if let Some((user, password)) = basic {
            cmd.args(["--user", user, "--password", password]);
        }
        if let Some(base) = redirect {
            cmd.args(["--redirect", base]);
        }
        let log = std::fs::File::create(root.path().join("requests.log")).unwrap();
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(log)
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
            tls,
            child,
        }
    }

    /// Publishes `repo` as `<name>.git` (a bare clone) and returns its https URL.
    pub fn publish(&self, repo: &GitRepo, name: &str) -> String {
        let dest = self.root.path().join(format!("{name}.git"));
        repo.git(&["clone", "-q", "--bare", ".", dest.to_str().unwrap()]);
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}/{name}.git", self.port)
    }

    /// Every request the server has received, one line each (`GET /x.git/info/refs ...`).
    pub fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(self.root.path().join("requests.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
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

/// A project: a Git repository of manifests under `app/`, a config file and a store.
pub struct Env {
    pub repo: GitRepo,
    pub dir: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Self {
        Self::with_sync("")
    }

    /// A project whose app has these extra `sync:` lines and a one-hour poll interval, so
    /// anything that happens fast was caused by the change feed, not the timer.
    pub fn with_sync(sync_yaml: &str) -> Self {
        Self::with_options("1h", sync_yaml)
    }

    pub fn with_options(interval: &str, sync_yaml: &str) -> Self {
        let repo = GitRepo::new();
        repo.write("app/a.yaml", configmap("a", &[("k", "1")]));
        repo.write("app/b.yaml", configmap("b", &[("k", "1")]));
        repo.write("app/README.md", "not a manifest");
        repo.commit("first");
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            "store:\n  sqlite: {{path: store.db}}\ncacheDir: cache\nserver: {{listen: \"127.0.0.1:0\"}}\napps:\n  - name: demo\n    source:\n      repo: {}\n      path: app\n      interval: {interval}\n    sync:\n      prune: true\n{sync_yaml}",
            repo.url()
        );
        std::fs::write(dir.path().join("driftless.yaml"), config).unwrap();
        Env { repo, dir }
    }

    pub fn config(&self) -> PathBuf {
        self.dir.path().join("driftless.yaml")
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_driftless"));
        c.arg("-c").arg(self.config()).current_dir(self.dir.path());
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().expect("driftless runs")
    }

    pub fn put(&self, yaml: &str) {
        let f = self.dir.path().join("put.yaml");
        std::fs::write(&f, yaml).unwrap();
        let out = self.run(&["store", "put", "-f", f.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A live object as JSON, `None` when absent.
    pub fn get(&self, kind: &str, name: &str) -> Option<Value> {
        let out = self.run(&["store", "get", kind, name, "-o", "json"]);
        match out.status.code() {
            Some(0) => Some(serde_json::from_slice(&out.stdout).unwrap()),
            Some(1) => None,
            other => panic!(
                "store get exited {other:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }

    pub fn status(&self) -> Value {
        let out = self.run(&["status", "-o", "json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["apps"][0].clone()
    }

    /// Every live object's key and resourceVersion.
    pub fn versions(&self) -> Vec<(String, String)> {
        let out = self.run(&["store", "list", "-o", "json"]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                (
                    format!("{}/{}", o["kind"], o["metadata"]["name"]),
                    o["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                )
            })
            .collect()
    }

    pub fn store_revision(&self) -> u64 {
        store_revision(&self.dir.path().join("store.db"))
    }

    pub fn agent(&self) -> Agent {
        self.agent_with(&[])
    }

    /// Starts `driftless run` with these environment variables.
    pub fn agent_with_env(&self, vars: &[(&str, &str)]) -> Agent {
        self.spawn_agent(&[], vars)
    }

    /// Starts `driftless [args] run`; its log goes to `agent.log` in the project folder.
    pub fn agent_with(&self, args: &[&str]) -> Agent {
        self.spawn_agent(args, &[])
    }

    fn spawn_agent(&self, args: &[&str], vars: &[(&str, &str)]) -> Agent {
        let log = std::fs::File::create(self.log_path()).unwrap();
        let child = self
            .cmd()
            .envs(vars.iter().copied())
            .args(args)
            .arg("run")
            .env("RUST_LOG", "info,driftless=debug")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("agent starts");
        Agent {
            child: Some(child),
            log: self.log_path(),
        }
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("agent.log")
    }

    /// The agent's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Waits for `f`, showing the agent's log if it does not come.
    pub fn wait(&self, what: &str, timeout: Duration, f: impl FnMut() -> bool) -> Duration {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| wait_for(what, timeout, f)))
        {
            Ok(d) => d,
            Err(e) => {
                eprintln!("agent log:\n{}", self.log());
                std::panic::resume_unwind(e)
            }
        }
    }
}

/// The store's revision, read through the library (another process's view).
pub fn store_revision(path: &Path) -> u64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use driftless::store::Store;
        let s = driftless::store::sqlite::SqliteStore::open(path, Default::default()).unwrap();
        s.revision().await.unwrap()
    })
}

pub struct Agent {
    child: Option<Child>,
    log: PathBuf,
}

impl Agent {
    /// The agent's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// SIGTERM, then the exit status and the log.
    pub fn stop(self) -> (Option<i32>, String) {
        self.stop_with("-TERM")
    }

    /// Sends `signal`, waits half a second, then stops the agent as [`Agent::stop`] does.
    pub fn signal_then_stop(self, signal: &str) -> (Option<i32>, String) {
        let pid = self.child.as_ref().unwrap().id().to_string();
        assert!(
            Command::new("kill")
                .arg(signal)
                .arg(&pid)
                .status()
                .unwrap()
                .success()
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
        self.stop()
    }

    /// Sends `signal` (`-TERM`, `-INT`), then the exit status and the log.
    pub fn stop_with(mut self, signal: &str) -> (Option<i32>, String) {
        let mut child = self.child.take().unwrap();
        let status = Command::new("kill")
            .arg(signal)
            .arg(child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
        let status = child.wait().unwrap();
        (
            status.code(),
            std::fs::read_to_string(&self.log).unwrap_or_default(),
        )
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Polls `f` every 20 ms until it returns true or `timeout` passes; returns the time taken.
pub fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return start.elapsed();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("timed out after {timeout:?} waiting for {what}");
}

/// Runs `driftless sync` in `env` and asserts it exits 0, showing its output if not.
pub fn sync_ok(env: &Env) {
    let out = env.run(&["sync"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A project whose app syncs `url` (any repository URL) at `path`.
pub fn env_for(url: &str, path: &str) -> Env {
    let env = Env::new();
    let config = format!(
        "store:\n  sqlite: {{path: store.db}}\ncacheDir: cache\nserver: {{listen: \"127.0.0.1:0\"}}\napps:\n  - name: demo\n    source:\n      repo: {url}\n      path: {path}\n      interval: 1h\n"
    );
    std::fs::write(env.config(), config).unwrap();
    env
}

impl Env {
    /// Replaces the `server:` line of the config with `block` (YAML at the top level).
    pub fn server_config(&self, block: &str) {
        let config = std::fs::read_to_string(self.config()).unwrap();
        let replaced = config.replace("server: {listen: \"127.0.0.1:0\"}\n", block);
        assert_ne!(config, replaced, "the config has the default server line");
        std::fs::write(self.config(), replaced).unwrap();
    }

    /// Appends lines to the (only, last) app of the config; indent them by four spaces.
    pub fn app_config(&self, lines: &str) {
        let config = std::fs::read_to_string(self.config()).unwrap();
        std::fs::write(self.config(), config + lines).unwrap();
    }

    /// The running agent's HTTP address, from its log (`addr=127.0.0.1:PORT`).
    ///
    /// Waits for the full server (`Agent started; HTTP server listening`): until the store
    /// answers, the same address serves only `/healthz`, and answers 503 in plain text to
    /// everything else.
    pub fn http_addr(&self) -> String {
        let mut found = None;
        self.wait("the HTTP server", Duration::from_secs(30), || {
            found = self
                .log()
                .lines()
                .filter(|l| l.contains("HTTP server listening"))
                .flat_map(str::split_whitespace)
                .find_map(|w| w.strip_prefix("addr=").map(str::to_string));
            found.is_some()
        });
        found.unwrap()
    }
}

/// `git daemon` serving every repository under `base` on a free loopback port (`git://`).
pub struct GitDaemon {
    child: Child,
    pub port: u16,
}

impl GitDaemon {
    pub fn start(base: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // `git-daemon` itself: `git daemon` would run it as a child that outlives a kill.
        let exec_path = Command::new("git").arg("--exec-path").output().unwrap();
        let exec_path = String::from_utf8_lossy(&exec_path.stdout)
            .trim()
            .to_string();
        let child = Command::new(Path::new(&exec_path).join("git-daemon"))
            .args([
                "--export-all",
                "--reuseaddr",
                "--listen=127.0.0.1",
                &format!("--port={port}"),
                &format!("--base-path={}", base.display()),
            ])
            .arg(base)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("git daemon starts");
        wait_for("git daemon", Duration::from_secs(10), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        GitDaemon { child, port }
    }

    /// The `git://` URL of the repository at `base/<name>`.
    pub fn url(&self, name: &str) -> String {
        format!("git://127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `sshd` on a free loopback port with its own host key, letting in the current user with
/// `client_key` (both ed25519, made with `ssh-keygen`). Repositories are addressed by absolute
/// path: `ssh://USER@127.0.0.1:PORT/abs/path.git`.
pub struct SshServer {
    pub dir: tempfile::TempDir,
    pub port: u16,
    /// The client's private key file.
    pub client_key: PathBuf,
    /// known_hosts lines for this server (`[127.0.0.1]:PORT ssh-ed25519 ...`).
    pub known_hosts: PathBuf,
    /// The host key's public half.
    pub host_key_pub: PathBuf,
    child: Child,
}

fn keygen(path: &Path) {
    let out = Command::new("ssh-keygen")
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "driftless-test",
            "-f",
        ])
        .arg(path)
        .output()
        .expect("ssh-keygen runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn spawn_sshd(d: &Path, port: u16) -> Child {
    // sshd started as root wants its privilege separation folder.
    let _ = std::fs::create_dir_all("/run/sshd");
    let sshd = ["/usr/sbin/sshd", "/usr/bin/sshd"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("sshd is installed (openssh-server; .ci/run installs it)");
    let child = Command::new(sshd)
        .args(["-D", "-e", "-f"])
        .arg(d.join("sshd_config"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join("sshd.log")).unwrap())
        .spawn()
        .expect("sshd starts");
    wait_for("sshd", Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    child
}

impl SshServer {
    /// Stops the server (an outage); [`SshServer::resume`] starts it again as it was.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn resume(&mut self) {
        self.child = spawn_sshd(self.dir.path(), self.port);
    }

    /// Stops the server and starts one with a new host key on the same port (a server
    /// replaced, or someone posing as it).
    pub fn replace_host_key(&mut self) {
        self.stop();
        let d = self.dir.path();
        std::fs::remove_file(d.join("host_key")).unwrap();
        std::fs::remove_file(d.join("host_key.pub")).unwrap();
        keygen(&d.join("host_key"));
        self.resume();
    }

    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        keygen(&d.join("host_key"));
        keygen(&d.join("client_key"));
        std::fs::copy(d.join("client_key.pub"), d.join("authorized_keys")).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {hk}\nAuthorizedKeysFile {ak}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\nStrictModes no\nUsePAM no\nPermitRootLogin prohibit-password\nPidFile {pid}\n",
            hk = d.join("host_key").display(),
            ak = d.join("authorized_keys").display(),
            pid = d.join("sshd.pid").display(),
        );
        std::fs::write(d.join("sshd_config"), config).unwrap();
        let child = spawn_sshd(d, port);
        let host_pub = std::fs::read_to_string(d.join("host_key.pub")).unwrap();
        let mut fields = host_pub.split_whitespace();
        let (kind, key) = (fields.next().unwrap(), fields.next().unwrap());
        std::fs::write(
            d.join("known_hosts"),
            format!("[127.0.0.1]:{port} {kind} {key}\n"),
        )
        .unwrap();
        SshServer {
            port,
            client_key: d.join("client_key"),
            known_hosts: d.join("known_hosts"),
            host_key_pub: d.join("host_key.pub"),
            child,
            dir,
        }
    }

    /// The URL of the repository at the absolute path `repo`.
    pub fn url(&self, repo: &Path) -> String {
        let user = std::env::var("USER").unwrap_or_else(|_| {
            String::from_utf8_lossy(&Command::new("whoami").output().unwrap().stdout)
                .trim()
                .to_string()
        });
        format!("ssh://{user}@127.0.0.1:{}{}", self.port, repo.display())
    }

    /// `ssh-keygen -lf` of the host key: `SHA256:...`.
    pub fn fingerprint(&self) -> String {
        let out = Command::new("ssh-keygen")
            .arg("-lf")
            .arg(&self.host_key_pub)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_string()
    }
}

impl Drop for SshServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An in-process GitHub commit-status API (`acme/web`), as GitHub documents it: listing a
/// commit's statuses answers an empty list, creating one answers 201.
pub async fn github_status_host() -> wiremock::MockServer {
    use wiremock::matchers::{method, path_regex};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let github = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path_regex(
            r"^/repos/acme/web/commits/[0-9a-f]{40}/statuses$",
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([])))
        .mount(&github)
        .await;
    Mock::given(method("POST"))
        .and(path_regex(r"^/repos/acme/web/statuses/[0-9a-f]{40}$"))
        .respond_with(ResponseTemplate::new(201))
        .mount(&github)
        .await;
    github
}

/// The statuses POSTed to `server` so far: (commit, body).
pub async fn posted_statuses(server: &wiremock::MockServer) -> Vec<(String, Value)> {
    server
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.method.as_str() == "POST")
        .map(|r| {
            let sha = r.url.path().rsplit('/').next().unwrap().to_string();
            (sha, serde_json::from_slice(&r.body).unwrap())
        })
        .collect()
}
