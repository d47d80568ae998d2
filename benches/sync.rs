//! Benchmark (not a test): the SQLite store, and with the `etcd` feature the etcd store, at
//! 10,000 objects.
//!
//! Generates a Git repository of N objects (default 10,000: half ConfigMaps, half Deployments,
//! ten per file), then measures with the release binary:
//!
//! - cold sync: `driftless sync` on a fresh store and a fresh repository cache;
//! - no-op resync: `driftless sync` again, nothing to do;
//! - drift-revert latency: with `driftless run` going, an out-of-band write to one object, until
//!   the agent has written it back (200 changes; median and p99);
//! - peak memory (max RSS) of the sync and of the running agent;
//!
//! then, unless `--quick`, the scale table (the same at 1,000, 10,000 and 100,000 objects, each
//! against its own floor) and the apps table (1, 100 and 1,000 apps of ten objects from one
//! repository on one agent: time until all are synced, a commit to one app applied after its
//! push webhook, drift latency, idle CPU over `--idle` seconds (60), peak RSS);
//!
//! and beside them the floor, in the same run: SQLite itself writing the same N documents in one
//! transaction; for etcd, the same N keys and values written with plain etcd transactions of 128
//! puts (etcd's default limit), one after another; for Kubernetes, the same objects applied by
//! plain server-side-apply requests, 16 at once, into a fresh namespace. Run with
//! `cargo bench --bench sync`, `cargo bench --features etcd --bench sync` for etcd too (it
//! starts an `etcd` from the PATH on loopback), and `--features kubernetes` for a local
//! `kube-apiserver` (`KUBE_APISERVER_BIN` and `ETCD_BIN`, as `scripts/test` builds them; the
//! drift there is written by another field manager, `kubectl-edit`); `-- --objects 100000` for
//! another size, `-- --runs 5` for more repetitions, `-- --store kubernetes` for one backend
//! only.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use driftless::object::{Object, ObjectKey};
use driftless::store::{Precondition, Store, Write, sqlite::SqliteStore};

#[cfg(all(feature = "etcd", not(feature = "kubernetes")))]
#[path = "../tests/common/etcd.rs"]
#[allow(dead_code)]
mod etcd_server;

#[cfg(feature = "kubernetes")]
#[path = "../tests/common/mod.rs"]
mod common;
#[cfg(all(feature = "kubernetes", feature = "etcd"))]
use common::etcd as etcd_server;

#[derive(Clone)]
struct Args {
    objects: usize,
    /// `--quick`: the main table only (no scale rows, no apps rows).
    quick: bool,
    /// `--idle S`: how long the idle CPU of the agent is measured (seconds, default 60).
    idle: u64,
    runs: usize,
    changes: usize,
    store: Option<String>,
    /// `--only agent-noop`: measure the running agent's no-op resync alone (for a profiler);
    /// `--only drift`: one cold sync, then the drift latencies (the other rows are not
    /// measured and print as zero); `--only apps`: the apps rows alone.
    only: Option<String>,
}

/// The store a measurement runs against.
#[derive(Clone)]
enum Backend {
    Sqlite,
    #[cfg(feature = "etcd")]
    Etcd {
        endpoint: String,
    },
    #[cfg(feature = "kubernetes")]
    Kubernetes {
        kubeconfig: PathBuf,
    },
}

impl Backend {
    fn name(&self) -> &'static str {
        match self {
            Backend::Sqlite => "SQLite",
            #[cfg(feature = "etcd")]
            Backend::Etcd { .. } => "etcd",
            #[cfg(feature = "kubernetes")]
            Backend::Kubernetes { .. } => "Kubernetes",
        }
    }

    /// The namespace of the app's objects in a run: each Kubernetes run has its own, so a
    /// cold sync starts from nothing.
    fn namespace(&self, _run: &str) -> String {
        match self {
            #[cfg(feature = "kubernetes")]
            Backend::Kubernetes { .. } => _run.to_string(),
            _ => "default".into(),
        }
    }

    /// Makes what a run needs before its first sync (a Kubernetes run's namespace).
    async fn prepare(&self, _run: &str) {
        #[cfg(feature = "kubernetes")]
        if let Backend::Kubernetes { kubeconfig } = self {
            let client = common::kube::client_from(kubeconfig).await;
            for ns in [_run.to_string(), format!("rec-{_run}")] {
                let api: kube::Api<k8s_openapi::api::core::v1::Namespace> =
                    kube::Api::all(client.clone());
                api.patch(
                    &ns,
                    &kube::api::PatchParams::apply("bench"),
                    &kube::api::Patch::Apply(serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})),
                )
                .await
                .unwrap();
            }
        }
    }

    /// The `store:` section of a run's config; `run` keeps etcd runs apart by key prefix.
    fn config(&self, _run: &str) -> String {
        match self {
            Backend::Sqlite => "store:\n  sqlite: {path: store.db}\n".into(),
            #[cfg(feature = "etcd")]
            Backend::Etcd { endpoint } => {
                format!("store:\n  etcd: {{endpoints: [\"{endpoint}\"], prefix: /bench-{_run}}}\n")
            }
            #[cfg(feature = "kubernetes")]
            Backend::Kubernetes { kubeconfig } => format!(
                "store:\n  kubernetes: {{kubeconfig: {}, namespace: rec-{_run}}}\n",
                kubeconfig.display()
            ),
        }
    }

    /// The store of a run, opened in this process.
    async fn open(&self, dir: &Path, _run: &str) -> Arc<dyn Store> {
        match self {
            Backend::Sqlite => {
                Arc::new(SqliteStore::open(&dir.join("store.db"), Default::default()).unwrap())
            }
            #[cfg(feature = "etcd")]
            Backend::Etcd { endpoint } => Arc::new(
                driftless::store::etcd::EtcdStore::connect(driftless::store::etcd::Options {
                    endpoints: vec![endpoint.clone()],
                    prefix: format!("/bench-{_run}"),
                    ..Default::default()
                })
                .await
                .unwrap(),
            ),
            #[cfg(feature = "kubernetes")]
            Backend::Kubernetes { kubeconfig } => Arc::new(
                driftless::store::kubernetes::KubeStore::open(
                    common::kube::client_from(kubeconfig).await,
                    driftless::store::kubernetes::Options {
                        namespace: format!("rec-{_run}"),
                        ..Default::default()
                    },
                )
                .await
                .unwrap(),
            ),
        }
    }

    /// The store of a run and a count of the server-side dry runs it has sent (always 0 where
    /// the backend sends none).
    async fn open_counted(
        &self,
        dir: &Path,
        run: &str,
    ) -> (Arc<dyn Store>, Box<dyn Fn() -> u64 + Send + Sync>) {
        match self {
            #[cfg(feature = "kubernetes")]
            Backend::Kubernetes { kubeconfig } => {
                let kube = driftless::store::kubernetes::KubeStore::open(
                    common::kube::client_from(kubeconfig).await,
                    driftless::store::kubernetes::Options {
                        namespace: format!("rec-{run}"),
                        ..Default::default()
                    },
                )
                .await
                .unwrap();
                let counter = kube.clone();
                (Arc::new(kube), Box::new(move || counter.dry_runs()))
            }
            _ => (self.open(dir, run).await, Box::new(|| 0)),
        }
    }

    /// The store the benchmark's own drift is written through: on Kubernetes another field
    /// manager (`kubectl-edit`), as a person's edit would be.
    async fn open_editor(&self, dir: &Path, run: &str) -> Arc<dyn Store> {
        match self {
            #[cfg(feature = "kubernetes")]
            Backend::Kubernetes { kubeconfig } => Arc::new(
                driftless::store::kubernetes::KubeStore::open(
                    common::kube::client_from(kubeconfig).await,
                    driftless::store::kubernetes::Options {
                        namespace: format!("rec-{run}"),
                        field_manager: "kubectl-edit".into(),
                        ..Default::default()
                    },
                )
                .await
                .unwrap(),
            ),
            _ => self.open(dir, run).await,
        }
    }
}

fn args() -> Args {
    let mut a = Args {
        objects: 10_000,
        quick: false,
        idle: 60,
        runs: 5,
        changes: 200,
        store: None,
        only: None,
    };
    let argv: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < argv.len() {
        let next = || argv.get(i + 1).and_then(|v| v.parse().ok());
        match argv[i].as_str() {
            "--objects" => a.objects = next().expect("--objects N"),
            "--runs" => a.runs = next().expect("--runs N"),
            "--changes" => a.changes = next().expect("--changes N"),
            "--store" => a.store = argv.get(i + 1).cloned(),
            "--only" => a.only = argv.get(i + 1).cloned(),
            "--quick" => a.quick = true,
            "--idle" => a.idle = next().expect("--idle SECONDS") as u64,
            _ => {}
        }
        i += 1;
    }
    a
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@example.com",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn document(i: usize) -> String {
    if i.is_multiple_of(2) {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: config-{i:06}\n  labels: {{app: bench, shard: \"{}\"}}\ndata:\n  index: \"{i}\"\n  greeting: hello from object {i}\n  settings.json: '{{\"replicas\": 3, \"debug\": false}}'\n",
            i % 16
        )
    } else {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web-{i:06}\n  labels: {{app: bench}}\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {{app: web-{i:06}}}\n  template:\n    metadata:\n      labels: {{app: web-{i:06}}}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.27\n        ports:\n        - containerPort: 80\n        resources:\n          requests: {{cpu: 10m, memory: 16Mi}}\n"
        )
    }
}

/// A repository with `n` objects under `manifests/`, ten documents per file.
fn make_repo(dir: &Path, n: usize) {
    git(dir, &["init", "-q", "-b", "main"]);
    let m = dir.join("manifests");
    std::fs::create_dir_all(&m).unwrap();
    let mut i = 0;
    let mut file = 0;
    while i < n {
        let mut text = String::new();
        for _ in 0..10.min(n - i) {
            text.push_str("---\n");
            text.push_str(&document(i));
            i += 1;
        }
        std::fs::write(m.join(format!("f{file:05}.yaml")), text).unwrap();
        file += 1;
    }
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "bench"]);
}

fn write_config(dir: &Path, repo: &Path, backend: &Backend, run: &str) -> PathBuf {
    let cfg = dir.join("driftless.yaml");
    std::fs::write(
        &cfg,
        format!(
            "{}cacheDir: cache\nserver: {{listen: \"127.0.0.1:{}\"}}\napps:\n  - name: bench\n    source:\n      repo: {}\n      path: manifests\n      interval: 1h\n    target: {{namespace: {}}}\n",
            backend.config(run),
            free_port(),
            repo.display(),
            backend.namespace(run)
        ),
    )
    .unwrap();
    cfg
}

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The server address in a config written by [`write_config`].
fn listen_addr(cfg: &Path) -> String {
    let text = std::fs::read_to_string(cfg).unwrap();
    let at = text.find("listen: \"").unwrap() + "listen: \"".len();
    text[at..].split('"').next().unwrap().to_string()
}

/// Runs `driftless sync`, returning (wall time, peak RSS in KiB).
///
/// The peak is the child's own `VmHWM`, read every 2 ms until it exits: `wait4`'s `ru_maxrss`
/// would include the bench's own memory, which a child spawned from it inherits as its high-water
/// mark across `exec`.
// The child is reaped by `wait_peak`.
#[allow(clippy::zombie_processes)]
fn run_sync(cfg: &Path) -> (Duration, u64) {
    let start = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_driftless"))
        .arg("-c")
        .arg(cfg)
        .arg("sync")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("driftless runs");
    let (code, rss) = wait_peak(child.id());
    let took = start.elapsed();
    assert_eq!(code, 0, "driftless sync failed");
    (took, rss)
}

/// Waits for a child, reading its `VmHWM` every 2 ms; (exit code, the last `VmHWM` in KiB).
fn wait_peak(pid: u32) -> (i32, u64) {
    let mut peak = 0;
    loop {
        peak = peak.max(vm_hwm_kib(pid));
        let mut status = 0;
        // SAFETY: `rusage` is plain data; wait4 with WNOHANG on our own child.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::wait4(pid as libc::pid_t, &mut status, libc::WNOHANG, &mut usage) };
        assert!(r >= 0, "wait4");
        if r == pid as libc::pid_t {
            return (libc::WEXITSTATUS(status), peak);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Waits for a child and returns (exit code, max RSS in KiB) from `wait4`.
fn wait_rusage(pid: u32) -> (i32, u64) {
    let mut status = 0;
    // SAFETY: `rusage` is plain data, zero-initialized, and wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(r, pid as libc::pid_t, "wait4");
    (libc::WEXITSTATUS(status), usage.ru_maxrss as u64)
}

/// The floor: the same documents, as JSON, in one SQLite transaction into a fresh file.
fn floor(dir: &Path, docs: &[String]) -> Duration {
    let path = dir.join(format!("floor-{}.db", rand_suffix()));
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    let _: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .unwrap();
    conn.execute_batch("PRAGMA synchronous=NORMAL; CREATE TABLE objects (k TEXT PRIMARY KEY, body TEXT NOT NULL) WITHOUT ROWID;").unwrap();
    let start = Instant::now();
    let tx = conn.transaction().unwrap();
    {
        let mut stmt = tx
            .prepare("INSERT INTO objects (k, body) VALUES (?1, ?2)")
            .unwrap();
        for (i, d) in docs.iter().enumerate() {
            stmt.execute(rusqlite::params![i.to_string(), d]).unwrap();
        }
    }
    tx.commit().unwrap();
    start.elapsed()
}

/// The etcd floor: the same keys (as driftless lays them out) and documents, written with plain
/// transactions of 128 puts one after another, under a fresh prefix.
#[cfg(feature = "etcd")]
fn etcd_floor(endpoint: &str, docs: &[String]) -> Duration {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut client = etcd_client::Client::connect([endpoint], None)
            .await
            .unwrap();
        let prefix = format!("/floor-{}", rand_suffix());
        let start = Instant::now();
        for (c, chunk) in docs.chunks(128).enumerate() {
            let ops: Vec<etcd_client::TxnOp> = chunk
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    etcd_client::TxnOp::put(
                        format!("{prefix}//ConfigMap/default/config-{:06}", c * 128 + i),
                        d.as_str(),
                        None,
                    )
                })
                .collect();
            client
                .txn(etcd_client::Txn::new().and_then(ops))
                .await
                .unwrap();
        }
        start.elapsed()
    })
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Starts `driftless run` on `cfg` (from the config's folder, where its relative paths are),
/// logging to `log`, with `env` set; the guard kills it if the measurement panics (a failed
/// run must not leave an agent behind to load the next one).
// Reaped by `stop_agent` (wait4).
#[allow(clippy::zombie_processes)]
fn start_agent(cfg: &Path, log: &Path, env: &[(&str, &str)]) -> (std::process::Child, KillOnDrop) {
    let agent = Command::new(env!("CARGO_BIN_EXE_driftless"))
        .arg("-c")
        .arg(cfg)
        .arg("run")
        .envs(env.iter().copied())
        .current_dir(cfg.parent().unwrap())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("agent starts");
    let guard = KillOnDrop(agent.id());
    (agent, guard)
}

/// Stops an agent [`start_agent`] started: SIGTERM, then reaped.
fn stop_agent(agent: std::process::Child, guard: KillOnDrop) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(agent.id().to_string())
        .status();
    let _ = wait_rusage(agent.id());
    std::mem::forget(guard);
}

/// Sends SIGKILL to a process when dropped.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-KILL")
            .arg(self.0.to_string())
            .status();
    }
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    let idx = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[idx]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn vm_hwm_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn main() {
    let a = args();
    let work = tempfile::tempdir().unwrap();
    // A repository of `n` objects and the documents as the JSON driftless stores, for the
    // floors.
    let setup = |n: usize| -> (PathBuf, Vec<String>) {
        let repo = work.path().join(format!("repo-{n}"));
        std::fs::create_dir_all(&repo).unwrap();
        eprintln!("generating a repository of {n} objects...");
        make_repo(&repo, n);
        let docs = (0..n)
            .map(|i| {
                let v: serde_json::Value = serde_saphyr::from_str(&document(i)).unwrap();
                serde_json::to_string(&v).unwrap()
            })
            .collect();
        (repo, docs)
    };
    let (repo, docs) = setup(a.objects);
    let wanted = |name: &str| {
        a.store
            .as_deref()
            .is_none_or(|s| s.eq_ignore_ascii_case(name))
    };
    // The scale rows and the apps rows, unless only the main table is asked for;
    // `--only apps`: the apps rows alone.
    let extra = !a.quick && a.only.is_none();
    let apps_only = a.only.as_deref() == Some("apps");
    if wanted("sqlite") {
        let floor_of = |docs: &[String]| {
            let mut floors: Vec<Duration> = (0..a.runs).map(|_| floor(work.path(), docs)).collect();
            median(&mut floors)
        };
        let label = |n: usize| format!("SQLite, {n} documents in one transaction");
        if !apps_only {
            let main = measure(
                &a,
                work.path(),
                &repo,
                &Backend::Sqlite,
                floor_of(&docs),
                &label(a.objects),
                true,
            );
            if extra {
                scale_rows(
                    &a,
                    work.path(),
                    &Backend::Sqlite,
                    main,
                    &setup,
                    &floor_of,
                    &label,
                );
            }
        }
        if extra || apps_only {
            apps_rows(&a, work.path(), &Backend::Sqlite);
        }
    }
    #[cfg(feature = "etcd")]
    if wanted("etcd") {
        let server = match std::env::var("DRIFTLESS_BENCH_ETCD") {
            Ok(e) => (None, e),
            Err(_) => {
                let s = etcd_server::EtcdServer::start_with(&["--quota-backend-bytes=8589934592"]);
                let e = s.endpoint();
                (Some(s), e)
            }
        };
        let floor_of = |docs: &[String]| {
            let mut floors: Vec<Duration> =
                (0..a.runs).map(|_| etcd_floor(&server.1, docs)).collect();
            median(&mut floors)
        };
        let label = |n: usize| format!("etcd, {n} keys in plain transactions of 128 puts");
        let backend = Backend::Etcd {
            endpoint: server.1.clone(),
        };
        if !apps_only {
            let main = measure(
                &a,
                work.path(),
                &repo,
                &backend,
                floor_of(&docs),
                &label(a.objects),
                true,
            );
            if extra {
                scale_rows(&a, work.path(), &backend, main, &setup, &floor_of, &label);
            }
        }
        if extra || apps_only {
            apps_rows(&a, work.path(), &backend);
        }
        drop(server);
    }
    #[cfg(feature = "kubernetes")]
    if wanted("kubernetes") {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let cp = rt.block_on(common::kube::ControlPlane::start());
        let kubeconfig = cp.kubeconfig.clone();
        let values: Vec<serde_json::Value> = docs
            .iter()
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        // (`--only drift` skips the floor: only the drift rows are printed.)
        let mut floors: Vec<Duration> = (0..a.runs)
            .filter(|_| a.only.as_deref() != Some("drift"))
            .map(|i| rt.block_on(kube_floor(&kubeconfig, &values, i)))
            .collect();
        if floors.is_empty() {
            floors.push(Duration::from_millis(1));
        }
        let floor_med = median(&mut floors);
        drop(rt);
        measure(
            &a,
            work.path(),
            &repo,
            &Backend::Kubernetes { kubeconfig },
            floor_med,
            &format!(
                "kube-apiserver, {} objects by plain server-side apply, 16 requests at once",
                a.objects
            ),
            true,
        );
        drop(cp);
    }
}

/// The scale table: cold sync, no-op resyncs, drift latency and peak RSS at 1,000, 10,000 and
/// 100,000 objects, each against its own floor measured in the same run (`main`: what the
/// main table measured at `a.objects`, reused for that size).
fn scale_rows(
    a: &Args,
    work: &Path,
    backend: &Backend,
    main: Option<Measured>,
    setup: &dyn Fn(usize) -> (PathBuf, Vec<String>),
    floor_of: &dyn Fn(&[String]) -> Duration,
    label: &dyn Fn(usize) -> String,
) {
    let mut rows = Vec::new();
    for n in [1_000, 10_000, 100_000] {
        let m = if n == a.objects {
            main
        } else {
            let (repo, docs) = setup(n);
            let floor = floor_of(&docs);
            let mut b = a.clone();
            b.objects = n;
            b.changes = a.changes.min(100);
            b.runs = if n >= 100_000 { 1 } else { a.runs.min(3) };
            measure(&b, work, &repo, backend, floor, &label(n), false)
        };
        rows.extend(m.map(|m| (n, m)));
    }
    let ten = rows.iter().find(|(n, _)| *n == 10_000).map(|(_, m)| m.cold);
    let x = |d: Duration, of: Duration| format!("{:.1}x", d.as_secs_f64() / of.as_secs_f64());
    println!();
    println!(
        "driftless bench, scale: {} store (medians; 100,000 objects: one run)",
        backend.name()
    );
    println!();
    println!(
        "| objects | floor | cold sync (vs floor, vs 10,000) | no-op resync, new process (vs floor) | no-op resync in the agent | drift revert p50 / p99 | peak RSS sync / agent |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (n, m) in &rows {
        println!(
            "| {n} | {} | {} ({}, {}) | {} ({}) | {} | {} / {} | {} / {} MiB |",
            ms(m.floor),
            ms(m.cold),
            x(m.cold, m.floor),
            ten.map_or("-".into(), |t| x(m.cold, t)),
            ms(m.noop),
            x(m.noop, m.floor),
            ms(m.agent_noop),
            ms(m.drift[0]),
            ms(m.drift[1]),
            m.rss[0] / 1024,
            m.rss[1] / 1024,
        );
    }
}

/// A ConfigMap of app `app`, the `k`-th of its ten; `rev` is written into its data. Its
/// `data.index` is what the drift changes (as in [`document`]): a field Git declares.
fn app_document(app: usize, k: usize, rev: usize) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app{app:04}-cm{k}\n  labels: {{app: app{app:04}}}\ndata:\n  index: \"{k}\"\n  rev: \"{rev}\"\n  greeting: hello from app {app}\n"
    )
}

/// Writes app `app`'s file (ten ConfigMaps) at `rev`.
fn write_app(repo: &Path, app: usize, rev: usize) {
    let dir = repo.join(format!("apps/a{app:04}"));
    std::fs::create_dir_all(&dir).unwrap();
    let text: String = (0..10)
        .map(|k| format!("---\n{}", app_document(app, k, rev)))
        .collect();
    std::fs::write(dir.join("objects.yaml"), text).unwrap();
}

/// The apps table: 1, 100 and 1,000 apps of ten objects each, from one repository (one
/// folder per app), on one agent.
fn apps_rows(a: &Args, work: &Path, backend: &Backend) {
    let rows: Vec<(usize, AppsMeasured)> = [1, 100, 1_000]
        .into_iter()
        .map(|n| (n, measure_apps(a, work, backend, n)))
        .collect();
    println!();
    println!(
        "driftless bench, apps: {} store, apps of 10 objects on one agent, one repository",
        backend.name()
    );
    println!();
    println!(
        "| apps | all synced after start | commit applied after its webhook, median / max of 5 | drift revert p50 / p99 | idle CPU over {} s | agent peak RSS |",
        a.idle
    );
    println!("|---|---|---|---|---|---|");
    for (n, m) in rows {
        println!(
            "| {n} | {} | {} / {} | {} / {} | {:.2}% of a core | {} MiB |",
            ms(m.synced),
            ms(m.commit[0]),
            ms(m.commit[1]),
            ms(m.drift[0]),
            ms(m.drift[1]),
            m.idle_cpu * 100.0,
            m.rss / 1024
        );
    }
}

/// What [`measure_apps`] found.
struct AppsMeasured {
    /// From the agent's start until every app is Synced.
    synced: Duration,
    /// A commit to one app until it is in the store, from the webhook: median, max.
    commit: [Duration; 2],
    /// Drift revert latency: median, p99.
    drift: [Duration; 2],
    /// CPU time over wall time while idle (1.0 = one core).
    idle_cpu: f64,
    /// Peak RSS in KiB.
    rss: u64,
}

/// CPU time (user + system) a process has used so far.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command (which may hold spaces) in parentheses.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the command.
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Duration::from_secs_f64((f[11] + f[12]) as f64 / tick)
}

/// `n` apps of ten objects from one repository on one agent: the time until all are synced,
/// a commit to one app applied after the push webhook (GitLab's, a shared token), drift
/// revert latency, idle CPU over `a.idle` seconds, peak RSS.
fn measure_apps(a: &Args, work: &Path, backend: &Backend, n: usize) -> AppsMeasured {
    let run = format!("{}-apps-{n}", backend.name().to_lowercase());
    let dir = work.join(&run);
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    for app in 0..n {
        write_app(&repo, app, 0);
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "apps"]);
    let ns = backend.namespace(&run);
    let listen = format!("127.0.0.1:{}", free_port());
    let mut cfg = format!(
        "{}cacheDir: cache\nserver: {{listen: \"{listen}\", webhooks: {{gitlab: {{secret: {{env: DRIFTLESS_BENCH_HOOK}}}}}}}}\napps:\n",
        backend.config(&run)
    );
    for app in 0..n {
        cfg.push_str(&format!(
            "  - name: a{app:04}\n    source: {{repo: {}, path: apps/a{app:04}, interval: 1h}}\n    target: {{namespace: {ns}}}\n",
            repo.display()
        ));
    }
    let cfg_path = dir.join("driftless.yaml");
    std::fs::write(&cfg_path, cfg).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(backend.prepare(&run));
    let agent_log = std::env::temp_dir().join(format!("driftless-bench-{run}-agent.log"));
    let started = Instant::now();
    let (agent, guard) = start_agent(
        &cfg_path,
        &agent_log,
        &[
            ("DRIFTLESS_BENCH_HOOK", "bench-token"),
            ("RUST_LOG", "info"),
        ],
    );
    eprintln!("{n} apps: the agent logs to {}", agent_log.display());
    let found = rt.block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let synced = match http
                .get(format!("http://{listen}/api/v1/apps"))
                .send()
                .await
            {
                Ok(r) if r.status() == 200 => {
                    let v: serde_json::Value = r.json().await.unwrap_or_default();
                    v["apps"].as_array().is_some_and(|apps| {
                        apps.len() == n && apps.iter().all(|a| a["sync"] == "Synced")
                    })
                }
                _ => false,
            };
            if synced {
                break;
            }
            assert!(Instant::now() < deadline, "{n} apps did not all sync");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let synced = started.elapsed();
        let store = backend.open(&dir, &run).await;
        // Commits to one app each, announced by a push webhook.
        let mut commits = Vec::new();
        for r in 1..=5 {
            // A webhook more than REQUEST_SPACING (1 s) after the last: the agent answers
            // closer ones together, at most once a second per app.
            tokio::time::sleep(driftless::reconcile::REQUEST_SPACING + Duration::from_millis(200))
                .await;
            let app = (r * 37) % n;
            write_app(&repo, app, r);
            git(
                &repo,
                &["commit", "-q", "-am", &format!("app {app} rev {r}")],
            );
            let key = ObjectKey::new("", "ConfigMap", ns.as_str(), format!("app{app:04}-cm0"));
            let payload = serde_json::json!({
                "object_kind": "push",
                "ref": "refs/heads/main",
                "project": {"git_http_url": repo.display().to_string(), "default_branch": "main"},
            });
            let start = Instant::now();
            let answer = http
                .post(format!("http://{listen}/webhooks/gitlab"))
                .header("X-Gitlab-Token", "bench-token")
                .header("X-Gitlab-Event", "Push Hook")
                .json(&payload)
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), 200, "the webhook is accepted");
            let want = serde_json::json!(r.to_string());
            loop {
                let live = store.get(&key).await.unwrap().expect("object exists");
                if live.get("data").and_then(|d| d.get("rev")) == Some(&want) {
                    break;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "commit not applied"
                );
                tokio::time::sleep(Duration::from_micros(500)).await;
            }
            commits.push(start.elapsed());
        }
        let names: Vec<String> = (0..n)
            .flat_map(|app| (0..10).map(move |k| format!("app{app:04}-cm{k}")))
            .collect();
        // Each change to another object: the same object changed back again and again is a
        // fight, whose reverts the agent backs off on purpose.
        let changes = a.changes.min(100).min(names.len());
        // The last webhook named every app (one repository): their fetches (each finding its
        // folder unchanged) run on after the one commit is applied. Drift is measured once
        // they are done, as at steady state; a revert during such a burst waits behind it.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut drift = revert_latencies(store.as_ref(), &ns, &names, changes, 0).await;
        // Idle: nothing changes for a while.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let cpu_before = cpu_time(agent.id());
        let idle_start = Instant::now();
        tokio::time::sleep(Duration::from_secs(a.idle)).await;
        let idle_cpu =
            (cpu_time(agent.id()) - cpu_before).as_secs_f64() / idle_start.elapsed().as_secs_f64();
        let commit = [median(&mut commits), *commits.iter().max().unwrap()];
        AppsMeasured {
            synced,
            commit,
            drift: [median(&mut drift), percentile(&mut drift, 0.99)],
            idle_cpu,
            rss: vm_hwm_kib(agent.id()),
        }
    });
    stop_agent(agent, guard);
    found
}

/// The Kubernetes floor: the same objects applied by plain server-side-apply requests, 16 at
/// once, into a fresh namespace `floor-<i>`.
#[cfg(feature = "kubernetes")]
async fn kube_floor(kubeconfig: &Path, docs: &[serde_json::Value], i: usize) -> Duration {
    use futures_util::StreamExt as _;
    use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};
    let client = common::kube::client_from(kubeconfig).await;
    let ns = format!("floor-{i}");
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    let params = kube::api::PatchParams::apply("floor");
    namespaces
        .patch(
            &ns,
            &params,
            &kube::api::Patch::Apply(serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})),
        )
        .await
        .unwrap();
    let cms: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), &ns);
    let deps: kube::Api<Deployment> = kube::Api::namespaced(client.clone(), &ns);
    let start = Instant::now();
    futures_util::stream::iter(docs)
        .map(|d| {
            let (cms, deps, params) = (cms.clone(), deps.clone(), params.clone());
            async move {
                let name = d["metadata"]["name"].as_str().unwrap();
                if d["kind"] == "ConfigMap" {
                    cms.patch(name, &params, &kube::api::Patch::Apply(d))
                        .await
                        .map(drop)
                } else {
                    deps.patch(name, &params, &kube::api::Patch::Apply(d))
                        .await
                        .map(drop)
                }
                .unwrap()
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    start.elapsed()
}

/// What [`measure`] found, for the scale table.
#[derive(Clone, Copy, Default)]
struct Measured {
    floor: Duration,
    cold: Duration,
    noop: Duration,
    agent_noop: Duration,
    drift: [Duration; 2],
    /// Peak RSS in KiB: sync (cold or no-op), running agent.
    rss: [u64; 2],
}

/// Measures one backend at `a.objects` objects and prints its table; `loaded`: also the drift
/// latency with 30 clients reading the app page. `None` with `--only agent-noop`.
fn measure(
    a: &Args,
    work: &Path,
    repo: &Path,
    backend: &Backend,
    floor_med: Duration,
    floor_label: &str,
    loaded_pass: bool,
) -> Option<Measured> {
    let tag = format!("{}-{}", backend.name().to_lowercase(), a.objects);
    let prepare_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    // Cold sync and no-op resync.
    let mut cold = Vec::new();
    let mut noop = Vec::new();
    let mut cold_rss = 0;
    let mut noop_rss = 0;
    let mut last_cfg = PathBuf::new();
    let mut last_run = String::new();
    let agent_noop_only = a.only.as_deref() == Some("agent-noop");
    let drift_only = a.only.as_deref() == Some("drift");
    for run in (0..a.runs).filter(|_| !agent_noop_only) {
        let run = format!("{tag}-run{run}");
        let dir = work.join(&run);
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = write_config(&dir, repo, backend, &run);
        prepare_rt.block_on(backend.prepare(&run));
        let (t, rss) = run_sync(&cfg);
        cold.push(t);
        cold_rss = cold_rss.max(rss);
        if !drift_only {
            let (t, rss) = run_sync(&cfg);
            noop.push(t);
            noop_rss = noop_rss.max(rss);
        }
        last_cfg = cfg;
        last_run = run;
    }

    // The running agent's periodic resync when nothing changed: the same reconcile the agent
    // runs at each poll, in process, after a first pass (the revision is known, so it fetches,
    // finds nothing new, reads the live objects and plans, and writes nothing).
    let agent_noop_med = if drift_only {
        Duration::ZERO
    } else {
        let run = format!("{tag}-in-process");
        let dir = work.join(&run);
        std::fs::create_dir_all(&dir).unwrap();
        let cfg_path = write_config(&dir, repo, backend, &run);
        prepare_rt.block_on(backend.prepare(&run));
        let cfg = driftless::config::load(&cfg_path).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (store, dry_runs) = backend.open_counted(&dir, &run).await;
            // As `driftless run` does on SQLite and etcd: versions from the change feed.
            let store: Arc<dyn Store> = match backend {
                Backend::Sqlite => Arc::new(
                    driftless::store::cached::VersionCache::wrap(store)
                        .await
                        .unwrap(),
                ),
                #[cfg(feature = "etcd")]
                Backend::Etcd { .. } => Arc::new(
                    driftless::store::cached::VersionCache::wrap(store)
                        .await
                        .unwrap(),
                ),
                #[allow(unreachable_patterns)]
                _ => store,
            };
            let git = driftless::source::GitCache::new(&cfg.config.cache_dir);
            let mut app = driftless::reconcile::App::load(
                cfg.config.apps[0].clone(),
                store.clone(),
                git,
                Arc::new(tokio::sync::Mutex::new(())),
                false,
            )
            .await
            .unwrap();
            // The change feed runs, as in the agent (on Kubernetes its watches keep the watch
            // cache the passes read); its events are drained and dropped.
            let mut feed = store.watch(store.revision().await.unwrap()).await.unwrap();
            tokio::spawn(async move { while feed.recv().await.is_some() {} });
            app.reconcile(driftless::reconcile::Trigger::Fetch).await;
            // One pass more (the first after applying reads back what it wrote), and time for
            // the watches to list what they cache.
            app.reconcile(driftless::reconcile::Trigger::Fetch).await;
            tokio::time::sleep(Duration::from_secs(2)).await;
            let before = store.revision().await.unwrap();
            let dry_runs_before = dry_runs();
            let mut times = Vec::new();
            for _ in 0..a.runs {
                let start = Instant::now();
                let (_, report) = app.reconcile(driftless::reconcile::Trigger::Fetch).await;
                times.push(start.elapsed());
                assert_eq!(
                    report.committed_revision, 0,
                    "a no-op resync writes nothing"
                );
            }
            // (A Kubernetes API server's revision moves with its own leases: there the passes'
            // committed revision, 0, is the check.)
            if store.promises().global_revision {
                assert_eq!(store.revision().await.unwrap(), before);
            }
            assert_eq!(
                dry_runs(),
                dry_runs_before,
                "a no-op resync sends no dry run"
            );
            median(&mut times)
        })
    };
    if agent_noop_only {
        println!(
            "no-op resync in the running agent, {} objects, {} store: median {:.1} ms of {} runs",
            a.objects,
            backend.name(),
            agent_noop_med.as_secs_f64() * 1000.0,
            a.runs
        );
        return None;
    }
    if noop.is_empty() {
        noop.push(Duration::ZERO);
    }
    let cold_med = median(&mut cold);
    let noop_med = median(&mut noop);

    // Drift-revert latency with the agent running.
    let dir = last_cfg.parent().unwrap().to_path_buf();
    // Outside the bench's temporary directory, so that it outlives a failed run.
    let agent_log = std::env::temp_dir().join(format!("driftless-bench-{tag}-agent.log"));
    let (agent, guard) = start_agent(
        &last_cfg,
        &agent_log,
        &[("RUST_LOG", "info,driftless=debug")],
    );
    eprintln!("the agent logs to {}", agent_log.display());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (mut latencies, mut loaded, page_rate, agent_rss) = rt.block_on(async {
        let store = backend.open(&dir, &last_run).await;
        let editor = backend.open_editor(&dir, &last_run).await;
        let ns = backend.namespace(&last_run);
        // Wait until the agent is up: ready (its first pass done; the status record says
        // Synced from the earlier runs already), and its status says Synced.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let deadline = Instant::now() + Duration::from_secs(180);
        let ready = format!("http://{}/readyz", listen_addr(&last_cfg));
        loop {
            let up = matches!(reqwest::get(&ready).await, Ok(r) if r.status() == 200);
            let st = driftless::status::read(store.as_ref(), "bench")
                .await
                .unwrap();
            if up && st.is_some_and(|s| s.sync == driftless::status::SyncStatus::Synced) {
                break;
            }
            assert!(Instant::now() < deadline, "agent did not come up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let names: Vec<String> = (0..a.objects)
            .step_by(2)
            .map(|i| format!("config-{i:06}"))
            .collect();
        let quiet = revert_latencies(editor.as_ref(), &ns, &names, a.changes, 0).await;
        if !loaded_pass {
            return (quiet, Vec::new(), 0.0, vm_hwm_kib(agent.id()));
        }
        // The same with 30 clients reading the app's page in a loop (5,000+ rows each).
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let url = format!("http://{}/apps/bench", listen_addr(&last_cfg));
        let mut readers = Vec::new();
        for _ in 0..30 {
            let (stop, url) = (stop.clone(), url.clone());
            readers.push(tokio::spawn(async move {
                let c = reqwest::Client::new();
                let mut served = 0u64;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    if let Ok(r) = c.get(&url).send().await
                        && r.status() == 200
                        && r.bytes().await.is_ok()
                    {
                        served += 1;
                    }
                }
                served
            }));
        }
        let loaded_start = Instant::now();
        let loaded = revert_latencies(editor.as_ref(), &ns, &names, a.changes, 1).await;
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let mut pages = 0;
        for r in readers {
            pages += r.await.unwrap();
        }
        let page_rate = pages as f64 / loaded_start.elapsed().as_secs_f64();
        (quiet, loaded, page_rate, vm_hwm_kib(agent.id()))
    });
    stop_agent(agent, guard);
    // The latency floor on an API server: the same changes reverted by the plainest client
    // (one watch of the namespace's ConfigMaps, one forced apply of the original data per
    // change), in the same run, the agent stopped.
    #[allow(unused_mut)]
    let mut revert_floor: Option<Vec<Duration>> = None;
    #[cfg(feature = "kubernetes")]
    if let Backend::Kubernetes { kubeconfig } = backend {
        let ns = backend.namespace(&last_run);
        revert_floor = Some(rt.block_on(async {
            let editor = backend.open_editor(&dir, &last_run).await;
            let reverter = plain_reverter(kubeconfig, &ns).await;
            let names: Vec<String> = (0..a.objects)
                .step_by(2)
                .map(|i| format!("config-{i:06}"))
                .collect();
            let l = revert_latencies(editor.as_ref(), &ns, &names, a.changes, 2).await;
            reverter.abort();
            l
        }));
    }
    let drift_med = median(&mut latencies);
    let drift_p99 = percentile(&mut latencies, 0.99);
    let (loaded_med, loaded_p99) = if loaded.is_empty() {
        (Duration::ZERO, Duration::ZERO)
    } else {
        (median(&mut loaded), percentile(&mut loaded, 0.99))
    };
    report(
        a,
        backend,
        floor_label,
        floor_med,
        [cold_med, noop_med, agent_noop_med],
        [cold_rss, noop_rss, agent_rss],
        [drift_med, drift_p99, loaded_med, loaded_p99],
        page_rate,
        revert_floor.map(|mut l| [median(&mut l), percentile(&mut l, 0.99)]),
    );
    Some(Measured {
        floor: floor_med,
        cold: cold_med,
        noop: noop_med,
        agent_noop: agent_noop_med,
        drift: [drift_med, drift_p99],
        rss: [cold_rss.max(noop_rss), agent_rss],
    })
}

/// A client that reverts every change to the namespace's ConfigMaps' `data` as plainly as an
/// API server allows: it lists them, watches from there, and answers each modification that
/// differs from what it listed with a forced server-side apply of the listed data (field
/// manager `floor-reverter`). No plan, no records, no status: the floor of drift latency.
#[cfg(feature = "kubernetes")]
async fn plain_reverter(kubeconfig: &Path, ns: &str) -> tokio::task::JoinHandle<()> {
    use futures_util::StreamExt as _;
    use k8s_openapi::api::core::v1::ConfigMap;
    use tracing::Instrument as _;
    let client = common::kube::client_from(kubeconfig).await;
    let cms: kube::Api<ConfigMap> = kube::Api::namespaced(client, ns);
    let list = cms.list(&Default::default()).await.unwrap();
    let from = list.metadata.resource_version.clone().unwrap_or_default();
    let original: std::collections::HashMap<String, serde_json::Value> = list
        .items
        .iter()
        .map(|c| {
            (
                c.metadata.name.clone().unwrap_or_default(),
                serde_json::to_value(&c.data).unwrap(),
            )
        })
        .collect();
    tokio::spawn(
        async move {
            let params = kube::api::PatchParams::apply("floor-reverter").force();
            let mut events = cms
                .watch(&kube::api::WatchParams::default(), &from)
                .await
                .unwrap()
                .boxed();
            while let Some(Ok(event)) = events.next().await {
                let kube::api::WatchEvent::Modified(cm) = event else {
                    continue;
                };
                let name = cm.metadata.name.clone().unwrap_or_default();
                let Some(want) = original.get(&name) else {
                    continue;
                };
                if serde_json::to_value(&cm.data).unwrap() != *want {
                    let body = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": name}, "data": want});
                    let _ = cms
                        .patch(&name, &params, &kube::api::Patch::Apply(body))
                        .await;
                }
            }
        }
        .instrument(tracing::info_span!("plain_reverter")),
    )
}

/// Writes one of the ConfigMaps `names` out of band `changes` times (`round` varies the choice)
/// and measures until the running agent has written each back.
async fn revert_latencies(
    store: &dyn Store,
    namespace: &str,
    names: &[String],
    changes: usize,
    round: usize,
) -> Vec<Duration> {
    {
        let poll = if store.promises().server_side_apply {
            Duration::from_millis(2)
        } else {
            Duration::from_micros(250)
        };
        let mut out = Vec::new();
        for c in 0..changes {
            let c = c + round * changes;
            let name = &names[(c * 7919) % names.len()];
            let key = ObjectKey::new("", "ConfigMap", namespace, name.as_str());
            let live = store.get(&key).await.unwrap().expect("object exists");
            let mut changed: Object = live.clone();
            changed
                .as_map_mut()
                .insert("data".into(), serde_json::json!({"index": "drifted"}));
            let start = Instant::now();
            let committed = store
                .commit(vec![Write::Put {
                    object: changed,
                    precondition: Precondition::Any,
                    json: None,
                }])
                .await
                .unwrap();
            loop {
                let now = store.get(&key).await.unwrap().unwrap();
                if now.resource_version() > Some(committed.revision)
                    && now.get("data") == live.get("data")
                {
                    break;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "drift not reverted"
                );
                // Each look is a request to the store: every 250 µs for the embedded ones,
                // every 2 ms for an API server (faster polling would load the server under
                // test more than the agent does).
                tokio::time::sleep(poll).await;
            }
            out.push(start.elapsed());
        }
        out
    }
}

/// Prints the table.
#[allow(clippy::too_many_arguments)]
fn report(
    a: &Args,
    backend: &Backend,
    floor_label: &str,
    floor_med: Duration,
    [cold_med, noop_med, agent_noop_med]: [Duration; 3],
    [cold_rss, noop_rss, agent_rss]: [u64; 3],
    [drift_med, drift_p99, loaded_med, loaded_p99]: [Duration; 4],
    page_rate: f64,
    revert_floor: Option<[Duration; 2]>,
) {
    let ratio = |d: Duration| format!("{:.1}x", d.as_secs_f64() / floor_med.as_secs_f64());
    println!();
    println!(
        "driftless bench: {} store, {} objects, {} runs, {} drift changes",
        backend.name(),
        a.objects,
        a.runs,
        a.changes
    );
    println!();
    println!("| measurement | median | vs floor | peak RSS |");
    println!("|---|---|---|---|");
    println!("| floor: {floor_label} | {} | 1.0x | |", ms(floor_med));
    println!(
        "| cold sync (fresh store and cache; fetch, parse, plan, apply) | {} | {} | {} MiB |",
        ms(cold_med),
        ratio(cold_med),
        cold_rss / 1024
    );
    println!(
        "| no-op resync, new process (fetch; the same files taken up from the inventory, not parsed; nothing read or planned that has not moved since the last process; nothing written) | {} | {} | {} MiB |",
        ms(noop_med),
        ratio(noop_med),
        noop_rss / 1024
    );
    println!(
        "| no-op resync in the running agent (fetch, read, plan; nothing written, no dry run) | {} | {} | |",
        ms(agent_noop_med),
        ratio(agent_noop_med)
    );
    if let Some([med, p99]) = revert_floor {
        println!(
            "| floor: drift reverted by a plain client (one watch, one forced apply per change), median | {} | | |",
            ms(med)
        );
        println!(
            "| floor: drift reverted by a plain client, p99 | {} | | |",
            ms(p99)
        );
    }
    println!("| drift-revert latency, median | {} | | |", ms(drift_med));
    println!("| drift-revert latency, p99 | {} | | |", ms(drift_p99));
    if page_rate > 0.0 {
        println!(
            "| drift-revert latency with 30 clients reading the app page ({page_rate:.0} pages/s served), median | {} | | |",
            ms(loaded_med)
        );
        println!(
            "| drift-revert latency with 30 clients reading the app page, p99 | {} | | |",
            ms(loaded_p99)
        );
    }
    println!(
        "| running agent (`driftless run`) after the drift changes | | | {} MiB |",
        agent_rss / 1024
    );
}
