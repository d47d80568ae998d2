//! The command line (ARCHITECTURE.md section 7): `run`, `sync`, `diff`, `status`, `validate` and
//! `store list|get|put|delete`, with the exit statuses the design gives.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::Value;
use tracing::Instrument;

use crate::config::{self, Loaded};
use crate::diff;
use crate::health;
use crate::manifest::{self, Diagnostic};
use crate::metrics::Metrics;
use crate::object::{self, Object, ObjectKey};
use crate::reconcile::{Agent, App, Previews, Trigger};
use crate::render::Renderer;
use crate::report;
use crate::server::{self, AppRoute, ServerState, WebhookSecrets};
use crate::source::{self, GitCache};
use crate::status::{self, ConditionStatus, ConditionType, Reason, SyncStatus};
use crate::store::{Precondition, Selector, Store, Write, sqlite::SqliteStore};
use secrecy::SecretString;

/// driftless: a GitOps sync agent. Applies declarations from Git to a store, reverts drift,
/// and reports what is true.
#[derive(Debug, Parser)]
#[command(name = "driftless", version, about)]
pub struct Cli {
    /// Config file.
    #[arg(short, long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Log format on standard error: `text` for people, `json` for machines.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Log formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Output formats of `status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StatusFormat {
    /// A table; `status` cuts long messages to [`MESSAGE_WIDTH`] characters.
    Table,
    /// A table with whole messages, as kubectl's `-o wide`.
    Wide,
    /// The JSON of ARCHITECTURE.md section 7.
    Json,
}

/// How many characters of a message the `status` table shows (`-o wide` shows all).
pub const MESSAGE_WIDTH: usize = 80;

/// `text` cut to `width` characters, ending in `…` when cut.
fn truncated(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_string()
    } else {
        let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// Output formats of `store`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ObjectFormat {
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the agent: reconcile every app until SIGTERM or SIGINT.
    Run,
    /// One reconcile pass of each app, then exit: 0 when every app is Synced, 1 otherwise.
    Sync {
        /// Only this app.
        #[arg(long)]
        app: Option<String>,
        /// Plan and print; write nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// What a sync would change: exit 0 no changes, 1 changes, 2 error. With `--desired` and
    /// `--live`, compares declared and live objects offline instead, matched by key.
    Diff {
        /// Only this app.
        #[arg(long, conflicts_with_all = ["desired", "live"])]
        app: Option<String>,
        /// Compare this revision (commit, branch or tag) instead of the configured ref.
        #[arg(long, conflicts_with_all = ["desired", "live"])]
        revision: Option<String>,
        /// Offline: the declared objects (a YAML or JSON file; `-` for standard input).
        #[arg(long, requires = "live")]
        desired: Option<PathBuf>,
        /// Offline: the live objects, as the store or a cluster has them. Each one's
        /// `kubectl.kubernetes.io/last-applied-configuration` annotation, when present, is the
        /// last-applied copy of the three-way diff.
        #[arg(long, requires = "desired")]
        live: Option<PathBuf>,
    },
    /// The health (and why) of each object in a file, with the config's custom rules: for
    /// testing health rules. Exit 0, or 2 when the file cannot be read.
    Health {
        /// A YAML or JSON file of live objects (`-` for standard input).
        #[arg(short, long)]
        file: PathBuf,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = StatusFormat::Table)]
        output: StatusFormat,
    },
    /// Waits until an app is synced and healthy (or what `--for` says), for CI pipelines:
    /// exit 0 as soon as it is, 1 at the timeout saying why not.
    Wait {
        /// The app.
        #[arg(long)]
        app: String,
        /// Conditions, comma-separated: `synced`, `healthy`.
        #[arg(long = "for", value_delimiter = ',', default_value = "synced,healthy")]
        conditions: Vec<String>,
        /// Also require this revision in force: a commit id or its prefix, or a name resolved in
        /// the app's repository as `git rev-parse` takes it (`main`, a tag, `HEAD~1`).
        #[arg(long)]
        revision: Option<String>,
        /// How long to wait, e.g. `90s`, `5m`.
        #[arg(long, default_value = "5m", value_parser = bounded_duration)]
        timeout: std::time::Duration,
    },
    /// The status the agent recorded in the store.
    Status {
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = StatusFormat::Table)]
        output: StatusFormat,
    },
    /// Parse manifest files or folders; print `path:line:col: severity: message`. Exit 0 when
    /// there are no errors, 1 otherwise.
    Validate {
        /// Files or folders.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Read and write the store directly, as a person or another controller would.
    Store {
        /// The store command.
        #[command(subcommand)]
        command: StoreCommand,
    },
}

/// `driftless store ...`.
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// List live objects, optionally of some kinds: `KIND[.GROUP]`, or several joined by commas
    /// as kubectl takes them (`svc,cm`).
    List {
        /// `KIND` or `KIND.GROUP` (kind case-insensitive, e.g. `deployment.apps`), or a
        /// comma-separated list of them.
        kind: Option<String>,
        /// Only this namespace.
        #[arg(short, long, conflicts_with = "all_namespaces")]
        namespace: Option<String>,
        /// Every namespace (the default without `-n`), as kubectl's `-A`.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// Output format (default: a table).
        #[arg(short, long, value_enum)]
        output: Option<ObjectFormat>,
    },
    /// Print one live object: exit 0, or 1 when not found.
    Get {
        /// `KIND` or `KIND.GROUP`, or `KIND[.GROUP]/NAME` as kubectl takes it (then no NAME).
        kind: String,
        /// Name.
        name: Option<String>,
        /// Namespace (default: `default`, then cluster-scoped). Ignored for a cluster-scoped
        /// object, as kubectl ignores it.
        #[arg(short, long)]
        namespace: Option<String>,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = ObjectFormat::Yaml)]
        output: ObjectFormat,
    },
    /// Write each object in FILE as given (`-` for standard input).
    Put {
        /// A YAML or JSON file of one or more objects.
        #[arg(short, long)]
        file: PathBuf,
        /// Namespace for namespaced objects that declare none (default `default`).
        #[arg(short, long)]
        namespace: Option<String>,
    },
    /// Delete a live object: exit 0, or 1 when not found.
    Delete {
        /// `KIND` or `KIND.GROUP`, or `KIND[.GROUP]/NAME` as kubectl takes it (then no NAME).
        kind: String,
        /// Name.
        name: Option<String>,
        /// Namespace (default: `default`, then cluster-scoped). Ignored for a cluster-scoped
        /// object, as kubectl ignores it.
        #[arg(short, long)]
        namespace: Option<String>,
    },
}

/// Parses the command line, runs the command and returns its exit status. Errors print their
/// chain to standard error and exit 2.
pub fn main() -> ExitCode {
    // One TLS stack for HTTP clients: rustls with ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Like other Unix tools, end quietly when the reader of standard output goes away
    // (`driftless store list | head`) instead of failing on the broken pipe.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // SAFETY: no thread has started yet, so nothing else uses libgit2.
    unsafe {
        crate::source::set_socket_timeouts();
    }
    let cli = Cli::parse();
    init_logging(&cli);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("driftless")
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(run_command(cli));
    // Do not wait for blocking tasks still running (a fetch from a silent server).
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn init_logging(cli: &Cli) {
    let default = if matches!(cli.command, Command::Run) {
        "info"
    } else {
        "warn"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

const DEFAULT_CONFIG: &str = "driftless.yaml";

/// Loads the config. With `required`, the file must exist; otherwise a missing default file
/// means the defaults (the SQLite store at `.driftless/store.db`, no apps).
fn load_config(path: Option<&Path>, required: bool) -> anyhow::Result<Loaded> {
    match path {
        Some(p) => Ok(config::load(p)?),
        None => {
            let p = Path::new(DEFAULT_CONFIG);
            if p.exists() {
                Ok(config::load(p)?)
            } else if required {
                bail!("no config: pass -c FILE or create {DEFAULT_CONFIG} in this folder")
            } else {
                Ok(config::parse(p, "{}")?)
            }
        }
    }
}

/// Opens the configured store: SQLite (creating the file and its folder when missing) or etcd
/// (connecting lazily: an unreachable cluster fails the first request, not this).
///
/// # Errors
///
/// When the folder cannot be created or the store cannot be opened; etcd configured in a build
/// without the `etcd` feature; an etcd password or TLS file that cannot be read.
pub async fn open_store(cfg: &Loaded) -> anyhow::Result<Arc<dyn Store>> {
    if cfg.config.store.etcd.is_some() {
        return open_etcd_store(cfg).await;
    }
    let path = cfg
        .sqlite_path()
        .context("no store configured")?
        .to_path_buf();
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let store = SqliteStore::open(&path, Default::default())
        .with_context(|| format!("cannot open the store at {}", path.display()))?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "etcd"))]
async fn open_etcd_store(_cfg: &Loaded) -> anyhow::Result<Arc<dyn Store>> {
    bail!(
        "store.etcd: this driftless was built without etcd support; build it with `cargo build --release --features etcd`"
    )
}

#[cfg(feature = "etcd")]
async fn open_etcd_store(cfg: &Loaded) -> anyhow::Result<Arc<dyn Store>> {
    Ok(Arc::new(open_etcd(cfg).await?))
}

/// Connects to the etcd cluster of `store.etcd`.
///
/// # Errors
///
/// When the password or a TLS file cannot be read, or the client cannot be set up.
#[cfg(feature = "etcd")]
pub async fn open_etcd(cfg: &Loaded) -> anyhow::Result<crate::store::etcd::EtcdStore> {
    use crate::store::etcd::{EtcdStore, Options, Tls};
    let e = &cfg
        .config
        .store
        .etcd
        .as_ref()
        .context("no etcd store configured")?
        .value;
    let password = read_optional(cfg, e.password.as_ref(), "store.etcd.password")?;
    let tls = match &e.tls {
        None => None,
        Some(t) => {
            let ca = match &t.ca {
                Some(p) => Some(pem_certificates(p, "store.etcd.tls.ca")?),
                None => None,
            };
            let identity = match (&t.cert, &t.key) {
                (Some(c), Some(_)) => {
                    let key = read_optional(cfg, t.key.as_ref(), "store.etcd.tls.key")?
                        .context("store.etcd.tls.key is empty")?;
                    pem_private_key(&key, "store.etcd.tls.key")?;
                    Some((pem_certificates(c, "store.etcd.tls.cert")?, key))
                }
                _ => None,
            };
            Some(Tls { ca, identity })
        }
    };
    let opts = Options {
        endpoints: e
            .endpoints
            .iter()
            .map(|x| x.value.trim().to_string())
            .collect(),
        prefix: e.prefix.value.clone(),
        user: e.username.clone().zip(password),
        tls,
        dial_timeout: e.dial_timeout.value,
        ..Options::default()
    };
    EtcdStore::connect(opts)
        .await
        .context("cannot set up the etcd client (store.etcd)")
}

/// Reads a PEM file of one or more certificates (`-----BEGIN CERTIFICATE-----`), for
/// `field`, checking that it parses before the client is built: a wrong file then fails the
/// start naming the field and the file, rather than every connection later.
///
/// # Errors
///
/// The file cannot be read, is not PEM, or holds no certificate.
#[cfg(feature = "etcd")]
fn pem_certificates(path: &std::path::Path, field: &str) -> anyhow::Result<Vec<u8>> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let bytes =
        std::fs::read(path).with_context(|| format!("{field}: cannot read {}", path.display()))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("{field}: {} is not valid PEM: {e}", path.display()))?;
    if certs.is_empty() {
        bail!(
            "{field}: {} holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)",
            path.display()
        );
    }
    Ok(bytes)
}

/// Checks that `key` is one PEM private key (PKCS#8, PKCS#1 or SEC1), for `field`.
///
/// # Errors
///
/// When it holds no private key or is not PEM; the message never shows the key.
#[cfg(feature = "etcd")]
fn pem_private_key(key: &SecretString, field: &str) -> anyhow::Result<()> {
    use rustls::pki_types::{PrivateKeyDer, pem::PemObject};
    use secrecy::ExposeSecret as _;
    PrivateKeyDer::from_pem_slice(key.expose_secret().as_bytes())
        .map(drop)
        .map_err(|e| {
            anyhow::anyhow!(
                "{field}: not a PEM private key (`-----BEGIN PRIVATE KEY-----`, RSA or EC): {e}"
            )
        })
}

/// The store each app writes through: the shared one, or (with etcd replicas) one fenced by
/// the app's lease.
struct Stores {
    shared: Arc<dyn Store>,
    per_app: std::collections::HashMap<String, Arc<dyn Store>>,
}

impl Stores {
    fn shared(store: &Arc<dyn Store>) -> Self {
        Self {
            shared: store.clone(),
            per_app: Default::default(),
        }
    }

    fn for_app(&self, app: &str) -> Arc<dyn Store> {
        self.per_app
            .get(app)
            .cloned()
            .unwrap_or_else(|| self.shared.clone())
    }
}

/// This replica's name: `store.etcd.replica`, else `DRIFTLESS_REPLICA`, else
/// `<hostname>-<pid>`.
///
/// # Errors
///
/// When `DRIFTLESS_REPLICA` is not a valid replica name.
#[cfg(feature = "etcd")]
fn replica_name(e: &config::EtcdConfig) -> anyhow::Result<String> {
    if let Some(r) = &e.replica {
        return Ok(r.value.clone());
    }
    if let Ok(r) = std::env::var("DRIFTLESS_REPLICA")
        && !r.trim().is_empty()
    {
        let r = r.trim().to_string();
        if let Some(problem) = config::replica_name_error(&r) {
            bail!("DRIFTLESS_REPLICA `{}` {problem}", r.escape_debug());
        }
        return Ok(r);
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "driftless".into());
    Ok(format!("{host}-{}", std::process::id()))
}

/// With etcd: the replica coordination of the configured apps, the fenced store of each app,
/// and the gates the agent waits on. Without: nothing to coordinate.
#[cfg(feature = "etcd")]
async fn replicas(
    cfg: &Loaded,
    store: &Arc<dyn Store>,
) -> anyhow::Result<(
    Stores,
    Option<(
        crate::store::etcd::Replicas,
        std::collections::HashMap<
            String,
            tokio::sync::watch::Receiver<Option<crate::store::Fence>>,
        >,
    )>,
)> {
    let Some(e) = &cfg.config.store.etcd else {
        return Ok((Stores::shared(store), None));
    };
    let etcd = open_etcd(cfg).await?;
    let names: Vec<String> = cfg
        .config
        .apps
        .iter()
        .map(|a| a.name.value.clone())
        .collect();
    let r = crate::store::etcd::Replicas::new(
        &etcd,
        &replica_name(&e.value)?,
        e.value.lease_ttl.value,
        names.clone(),
    );
    let mut stores = Stores::shared(store);
    let mut gates = std::collections::HashMap::new();
    for n in names {
        if let Some(g) = r.gate(&n) {
            stores
                .per_app
                .insert(n.clone(), Arc::new(etcd.fenced(g.clone())));
            gates.insert(n, g);
        }
    }
    Ok((stores, Some((r, gates))))
}

/// Waits until the store answers (an etcd cluster may still be starting), logging each
/// failure; false when a stop signal came first.
async fn wait_for_store(store: &Arc<dyn Store>) -> anyhow::Result<bool> {
    let mut delay = std::time::Duration::from_millis(500);
    loop {
        match store.revision().await {
            Ok(_) => return Ok(true),
            Err(e) => {
                tracing::warn!(backend = store.backend(), error = %crate::reconcile::error_chain(&e), retry_in = ?delay, "Store unreachable; waiting for it");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    r = wait_for_signal() => { r?; return Ok(false); }
                }
                delay = (delay * 2).min(std::time::Duration::from_secs(30));
            }
        }
    }
}

/// For reading commands: the store if its file exists. A missing file is an empty store (the
/// agent creates it on its first run); reading commands do not create one, so they never leave
/// an empty store behind in the wrong folder. Says so on standard error.
///
/// # Errors
///
/// When the store exists but cannot be opened.
async fn open_existing_store(cfg: &Loaded) -> anyhow::Result<Arc<dyn Store>> {
    if cfg.config.store.etcd.is_some() {
        return open_store(cfg).await;
    }
    let path = cfg.sqlite_path().context("no store configured")?;
    if path.exists() {
        return open_store(cfg).await;
    }
    eprintln!(
        "note: no store at {} yet (the agent creates it on its first run)",
        path.display()
    );
    Ok(Arc::new(crate::store::memory::MemoryStore::new()))
}

async fn run_command(cli: Cli) -> anyhow::Result<u8> {
    let config = cli.config.as_deref();
    match cli.command {
        Command::Run => run(load_config(config, true)?).await,
        Command::Sync { app, dry_run } => sync(load_config(config, true)?, app, dry_run).await,
        Command::Diff {
            desired: Some(desired),
            live: Some(live),
            ..
        } => Ok(diff_offline(&desired, &live)),
        Command::Diff { app, revision, .. } => {
            diff_cmd(load_config(config, true)?, app, revision).await
        }
        Command::Health { file, output } => health_cmd(load_config(config, false)?, &file, output),
        Command::Wait {
            app,
            conditions,
            revision,
            timeout,
        } => {
            wait_cmd(
                load_config(config, false)?,
                &app,
                &conditions,
                revision.as_deref(),
                timeout,
            )
            .await
        }
        Command::Status { output } => status_cmd(load_config(config, true)?, output).await,
        Command::Validate { paths } => Ok(validate(&paths)),
        Command::Store { command } => store_cmd(load_config(config, false)?, command).await,
    }
}

async fn run(cfg: Loaded) -> anyhow::Result<u8> {
    // Listen first, before anything is created on disk: a start that fails (the port is taken)
    // leaves no new files. While the store is still unreachable (etcd starting), /healthz
    // answers (the process is alive, so a liveness probe does not restart it) and /readyz says
    // why it is not ready. The full server takes the same socket over afterwards.
    let server = &cfg.config.server;
    let socket = std::net::TcpListener::bind(server.listen.value.as_str())
        .with_context(|| format!("cannot listen on {} (server.listen)", server.listen.value))?;
    let store = open_store(&cfg).await?;
    // One agent per SQLite store; etcd replicas share apps through leases instead.
    let _lock = match cfg.sqlite_path() {
        Some(_) => Some(lock_agent(&cfg)?),
        None => None,
    };
    socket
        .set_nonblocking(true)
        .context("cannot set up the listening socket")?;
    let waiting = tokio::net::TcpListener::from_std(
        socket
            .try_clone()
            .context("cannot set up the listening socket")?,
    )
    .context("cannot set up the listening socket")?;
    if let Ok(addr) = socket.local_addr() {
        tracing::debug!(%addr, "Listening; the full HTTP server starts once the store answers");
    }
    let (waited_tx, mut waited_rx) = tokio::sync::watch::channel(false);
    let early = tokio::spawn(
        async move {
            let waiting = server::GuardedListener::new(
                waiting,
                server::MAX_CONNECTIONS,
                server::IDLE_TIMEOUT,
            );
            let _ = axum::serve(waiting, server::waiting_router())
                .with_graceful_shutdown(async move {
                    let _ = waited_rx.changed().await;
                })
                .await;
        }
        .instrument(tracing::info_span!("http_server_waiting")),
    );
    let reachable = wait_for_store(&store).await?;
    let _ = waited_tx.send(true);
    let _ = early.await;
    if !reachable {
        return Ok(0);
    }
    #[cfg(feature = "etcd")]
    let (stores, replicas) = replicas(&cfg, &store).await?;
    #[cfg(not(feature = "etcd"))]
    let stores = Stores::shared(&store);
    let git = git_cache(&cfg)?;
    if cfg.config.apps.is_empty() {
        tracing::warn!(config = %cfg.path.display(), "No apps configured");
    }
    let metrics = Arc::new(Metrics::new());
    for a in &cfg.config.apps {
        metrics.register_app(&a.name.value);
    }
    let queue = report::Queue::default();
    let claim = Arc::new(tokio::sync::Mutex::new(()));
    let apps = load_apps(
        &cfg,
        &stores,
        &git,
        None,
        false,
        Some(&metrics),
        &queue,
        &claim,
    )
    .await?;
    let previews = load_previews(&cfg, &stores, &git, &queue, &claim).await?;
    let state_parts = server_secrets(&cfg)?;
    let listener =
        tokio::net::TcpListener::from_std(socket).context("cannot set up the listening socket")?;
    let addr = listener.local_addr().context("no local address")?;
    let (tx, rx) = tokio::sync::watch::channel(false);
    let agent = Agent::new(store.clone(), apps).with_previews(previews);
    // The replicas give their apps back only once the app loops have stopped, so a reconcile
    // in progress is not cut off by its own fence.
    #[cfg(feature = "etcd")]
    let (release_tx, release_rx) = tokio::sync::watch::channel(false);
    #[cfg(feature = "etcd")]
    let (agent, coordination) = match replicas {
        Some((r, gates)) => {
            tracing::info!(replica = %r.name(), lease_ttl_seconds = r.ttl().as_secs(), "Sharing the apps with the other replicas through etcd leases");
            let coordinated = r.coordinated();
            let task = tokio::spawn(
                r.run(release_rx)
                    .instrument(tracing::info_span!("replicas")),
            );
            (agent.with_gates(gates, coordinated), Some(task))
        }
        None => (agent, None),
    };
    let (handle, join) = agent.spawn(rx.clone());
    let state = ServerState {
        readers: Default::default(),
        store,
        handle,
        metrics: metrics.clone(),
        token: state_parts.0,
        webhooks: state_parts.1,
        apps: Arc::new(
            cfg.config
                .apps
                .iter()
                .map(|a| AppRoute {
                    name: a.name.value.clone(),
                    repo: a.source.repo.value.clone(),
                    reference: a.source.reference.clone(),
                    previews: a.preview.is_some(),
                })
                .collect(),
        ),
    };
    let mut stop_server = rx.clone();
    let http = tokio::spawn(
        async move {
            let listener = server::GuardedListener::new(
                listener,
                server::MAX_CONNECTIONS,
                server::IDLE_TIMEOUT,
            );
            let served = axum::serve(listener, server::router(state))
                .with_graceful_shutdown(async move {
                    let _ = stop_server.changed().await;
                })
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "HTTP server failed");
            }
        }
        .instrument(tracing::info_span!("http_server")),
    );
    let writer = tokio::spawn(
        report::Writer::new(queue, Some(metrics))
            .run(rx, std::time::Duration::from_secs(10))
            .instrument(tracing::info_span!("commit_status_writer")),
    );
    tracing::info!(config = %cfg.path.display(), apps = cfg.config.apps.len(), %addr, "Agent started; HTTP server listening");
    wait_for_signal().await?;
    tracing::info!("Stopping");
    let _ = tx.send(true);
    let stopping = async {
        join.await.context("agent task failed")?;
        #[cfg(feature = "etcd")]
        let _ = release_tx.send(true);
        #[cfg(feature = "etcd")]
        if let Some(c) = coordination {
            c.await.context("replica coordination failed")?;
        }
        writer.await.context("commit status writer failed")?;
        http.await.context("HTTP server task failed")?;
        anyhow::Ok(())
    };
    match tokio::time::timeout(STOP_GRACE, stopping).await {
        Ok(done) => {
            done?;
            tracing::info!("Stopped cleanly");
        }
        Err(_) => {
            // Every sync's writes are one store transaction, so leaving one unfinished loses
            // nothing; a fetch can always be done again.
            tracing::warn!(
                grace_seconds = STOP_GRACE.as_secs(),
                "Stopped without waiting any longer for a reconcile, a commit status or an HTTP connection still in progress"
            );
        }
    }
    Ok(0)
}

/// How long `run` waits after SIGTERM or SIGINT for the reconcile in progress, the last commit
/// statuses and open HTTP connections (inside Kubernetes' default grace period of 30 s).
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(20);

/// The secrets of the server section: the sync endpoint's token and the webhook secrets.
fn server_secrets(cfg: &Loaded) -> anyhow::Result<(Option<SecretString>, WebhookSecrets)> {
    let server = &cfg.config.server;
    let read = |h: &Option<config::WebhookConfig>, field: &str| {
        read_optional(cfg, h.as_ref().map(|h| &h.secret), field)
    };
    let token = read_optional(cfg, server.token.as_ref(), "server.token")?;
    let hooks = WebhookSecrets {
        github: read(&server.webhooks.github, "server.webhooks.github.secret")?,
        gitea: read(&server.webhooks.gitea, "server.webhooks.gitea.secret")?,
        gitlab: read(&server.webhooks.gitlab, "server.webhooks.gitlab.secret")?,
    };
    Ok((token, hooks))
}

/// Reads a secret the config may leave out; an error names the file and `field`.
fn read_optional(
    cfg: &Loaded,
    secret: Option<&serde_saphyr::Spanned<config::SecretRef>>,
    field: &str,
) -> anyhow::Result<Option<SecretString>> {
    Ok(match secret {
        Some(s) => Some(config::read_secret(&cfg.path, s, field)?),
        None => None,
    })
}

/// `server.externalUrl`, the base of the links in commit statuses and comments.
fn external_url(cfg: &Loaded) -> Option<String> {
    cfg.config
        .server
        .external_url
        .as_ref()
        .map(|u| u.value.clone())
}

/// The keys an app's `source.verify` trusts (the config's `index`-th app).
///
/// # Errors
///
/// A secret that cannot be read, a key file that does not parse (naming the field), or no key
/// at all.
fn trust(cfg: &Loaded, index: usize, v: &config::VerifyConfig) -> anyhow::Result<source::Trust> {
    use secrecy::ExposeSecret as _;
    let mut trust = source::Trust::default();
    let field = |f: &str| format!("apps[{index}].source.verify.{f}");
    if let Some(text) = read_optional(cfg, v.allowed_signers.as_ref(), &field("allowedSigners"))? {
        trust.ssh = source::AllowedSigners::parse(text.expose_secret()).map_err(|e| {
            anyhow::anyhow!("{}: {}: {e}", cfg.path.display(), field("allowedSigners"))
        })?;
    }
    if let Some(text) = read_optional(cfg, v.openpgp_keys.as_ref(), &field("openpgpKeys"))? {
        trust.openpgp = source::OpenPgpKeys::parse(text.expose_secret()).map_err(|e| {
            anyhow::anyhow!("{}: {}: {e}", cfg.path.display(), field("openpgpKeys"))
        })?;
    }
    if trust.ssh.is_empty() && trust.openpgp.is_empty() {
        anyhow::bail!(
            "{}: apps[{index}].source.verify: no key to trust",
            cfg.path.display()
        );
    }
    Ok(trust)
}

/// The config's custom health rules, compiled.
fn health_rules(cfg: &Loaded) -> anyhow::Result<health::CustomRules> {
    let mut rules = Vec::new();
    for (i, r) in cfg.config.health.iter().enumerate() {
        let expr = |e: &Option<serde_saphyr::Spanned<String>>| e.as_ref().map(|s| s.value.clone());
        let (h, p, d) = (expr(&r.healthy), expr(&r.progressing), expr(&r.degraded));
        rules.push(
            health::CustomRule::new(&r.group, &r.kind, h.as_deref(), p.as_deref(), d.as_deref())
                .with_context(|| format!("{}: health[{i}]", cfg.path.display()))?,
        );
    }
    Ok(health::CustomRules::new(rules))
}

/// The repository cache, with each app's `source.auth` read (an error names the missing
/// secret's config key).
fn git_cache(cfg: &Loaded) -> anyhow::Result<GitCache> {
    let git = GitCache::new(&cfg.config.cache_dir);
    for (i, app) in cfg.config.apps.iter().enumerate() {
        let Some(a) = &app.source.auth else {
            continue;
        };
        let read = |s: &Option<serde_saphyr::Spanned<config::SecretRef>>, key: &str| {
            read_optional(cfg, s.as_ref(), &format!("apps[{i}].source.auth.{key}"))
        };
        let secret = match read(&a.token, "token")? {
            Some(t) => Some(t),
            None => read(&a.password, "password")?,
        };
        let known_hosts = read(&a.known_hosts, "knownHosts")?.map(|k| {
            use secrecy::ExposeSecret as _;
            k.expose_secret().to_string()
        });
        if a.insecure_skip_host_key_check {
            tracing::warn!(app = %app.name.value, "insecureSkipHostKeyCheck: SSH host keys of this app's repository are NOT checked");
        }
        git.set_auth(
            &app.source.repo.value,
            source::Auth {
                username: a.username.clone(),
                secret,
                ssh_key: read(&a.ssh_key, "sshKey")?,
                known_hosts,
                insecure_skip_host_key_check: a.insecure_skip_host_key_check,
            },
        );
    }
    Ok(git)
}

/// The commit-status provider of an app's `status` section (the config's `index`-th app).
/// Reading a token that is not there is an error naming its config key.
fn status_provider(
    cfg: &Loaded,
    index: usize,
    st: &config::StatusConfig,
) -> anyhow::Result<Arc<dyn report::ProviderClient>> {
    let token = config::read_secret(&cfg.path, &st.token, &format!("apps[{index}].status.token"))?;
    let provider = report::HttpProvider::new(
        st.provider,
        st.api_url.as_ref().map(|u| u.value.as_str()),
        &st.repository.value,
        token,
        st.username.clone(),
    )
    .context("cannot build the HTTP client")?;
    Ok(Arc::new(provider))
}

/// The previews of every app with a `preview` section, reporting through `queue` when the app
/// has a `status` section.
async fn load_previews(
    cfg: &Loaded,
    stores: &Stores,
    git: &GitCache,
    queue: &report::Queue,
    claim: &Arc<tokio::sync::Mutex<()>>,
) -> anyhow::Result<Vec<Previews>> {
    let rules = health_rules(cfg)?;
    let external_url = external_url(cfg);
    let mut out = Vec::new();
    for (index, app_cfg) in cfg.config.apps.iter().enumerate() {
        if app_cfg.preview.is_none() {
            continue;
        }
        let mut p = Previews::load(
            app_cfg.clone(),
            stores.for_app(&app_cfg.name.value),
            git.clone(),
            claim.clone(),
        )
        .await?
        .with_health_rules(rules.clone());
        if let Some(st) = &app_cfg.status {
            p = p.with_reporter(report::Reporter::new(
                status_provider(cfg, index, st)?,
                external_url.clone(),
                queue.clone(),
            ));
        }
        out.push(p.with_external_url(external_url.clone()));
    }
    Ok(out)
}

/// Loads the selected apps (all when `only` is `None`) with their reporters and metrics.
/// Reading a status token that is not there is an error naming its config key.
#[allow(clippy::too_many_arguments)]
async fn load_apps(
    cfg: &Loaded,
    stores: &Stores,
    git: &GitCache,
    only: Option<&str>,
    dry_run: bool,
    metrics: Option<&Arc<Metrics>>,
    queue: &report::Queue,
    claim: &Arc<tokio::sync::Mutex<()>>,
) -> anyhow::Result<Vec<App>> {
    let rules = health_rules(cfg)?;
    let external_url = external_url(cfg);
    let mut apps = Vec::new();
    for app_cfg in selected_apps(cfg, only)? {
        let index = cfg
            .config
            .apps
            .iter()
            .position(|a| a.name.value == app_cfg.name.value)
            .unwrap_or(0);
        let span = tracing::info_span!("app", app = %app_cfg.name.value);
        let status = app_cfg.status.clone();
        let verify = app_cfg.source.verify.clone();
        let store = stores.for_app(&app_cfg.name.value);
        let mut app = App::load(app_cfg, store, git.clone(), claim.clone(), dry_run)
            .instrument(span)
            .await?;
        if let Some(v) = verify {
            app = app.with_signers(Arc::new(trust(cfg, index, &v)?));
        }
        if let Some(st) = status
            && !dry_run
        {
            app = app.with_reporter(report::Reporter::new(
                status_provider(cfg, index, &st)?,
                external_url.clone(),
                queue.clone(),
            ));
        }
        if let Some(m) = metrics {
            app = app.with_metrics(m.clone());
        }
        apps.push(app.with_health_rules(rules.clone()));
    }
    Ok(apps)
}

/// Takes the store's agent lock (`<store file>.agent.lock`, an advisory lock the kernel drops
/// when the process ends), so that two agents never reconcile the same apps on one SQLite store.
/// Held for as long as the returned file lives.
///
/// # Errors
///
/// When another process holds the lock, or the lock file cannot be created.
fn lock_agent(cfg: &Loaded) -> anyhow::Result<std::fs::File> {
    let store = cfg.sqlite_path().context("no store configured")?;
    let mut name = store.as_os_str().to_owned();
    name.push(".agent.lock");
    let path = PathBuf::from(name);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => bail!(
            "another agent is already running on the store {} (it holds {}); one agent per store",
            store.display(),
            path.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("cannot lock {}", path.display()))
        }
    }
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("cannot listen for SIGINT")?,
        _ = term.recv() => {}
    }
    Ok(())
}

fn selected_apps(cfg: &Loaded, app: Option<&str>) -> anyhow::Result<Vec<config::AppConfig>> {
    match app {
        Some(name) => match cfg.app(name) {
            Some(a) => Ok(vec![a.clone()]),
            None => bail!("no app named `{name}` in {}", cfg.path.display()),
        },
        None => Ok(cfg.config.apps.clone()),
    }
}

async fn sync(cfg: Loaded, app: Option<String>, dry_run: bool) -> anyhow::Result<u8> {
    let store = open_store(&cfg).await?;
    let git = git_cache(&cfg)?;
    let queue = report::Queue::default();
    let claim = Arc::new(tokio::sync::Mutex::new(()));
    let apps = load_apps(
        &cfg,
        &Stores::shared(&store),
        &git,
        app.as_deref(),
        dry_run,
        None,
        &queue,
        &claim,
    )
    .await?;
    let mut all_synced = true;
    for mut app in apps {
        let span = tracing::info_span!("app", app = %app.name());
        // A sync asked for by a person: sync windows with `manualSync: true` let it through.
        let (_, report) = app.reconcile(Trigger::Manual).instrument(span).await;
        let st = app.status();
        if dry_run {
            print!("{}", report.dry_run_diff);
        }
        let s = report.summary;
        // What was done, or with nothing written, what would be.
        let (created, updated, deleted) = if dry_run || report.detect_only {
            ("to create", "to update", "to delete")
        } else {
            ("created", "updated", "deleted")
        };
        println!(
            "{}: {} {} at {}: {} {created}, {} {updated}, {} {deleted}, {} unchanged{}",
            st.name,
            st.sync,
            st.health,
            st.revision
                .as_deref()
                .map_or("-", |r| r.get(..12).unwrap_or(r)),
            s.create,
            s.update,
            s.delete,
            s.unchanged,
            if dry_run {
                " (dry run)"
            } else if report.detect_only {
                if st
                    .condition(ConditionType::Ready)
                    .is_some_and(|c| c.reason == Reason::HeldBySyncWindow)
                {
                    " (held by a sync window: planned, not written)"
                } else {
                    " (detect-only: planned, not written)"
                }
            } else {
                ""
            }
        );
        for d in &st.diagnostics {
            eprintln!("{d}");
        }
        if let Some(ready) = st.condition(ConditionType::Ready)
            && ready.status != ConditionStatus::True
        {
            println!("  {}: {}", ready.reason, ready.message);
        }
        let synced = if dry_run {
            st.sync == SyncStatus::Synced && s.create + s.update + s.delete == 0
        } else {
            st.sync == SyncStatus::Synced
        };
        all_synced &= synced;
    }
    // Commit statuses go out before the process ends (bounded: a dead Git host must not hang
    // a CI job).
    if !queue.is_empty() {
        let mut writer = report::Writer::new(queue, None);
        if tokio::time::timeout(std::time::Duration::from_secs(60), writer.flush())
            .instrument(tracing::info_span!("commit_status_writer"))
            .await
            .is_err()
        {
            eprintln!("warning: not every commit status was posted within 60 s");
        }
    }
    Ok(if all_synced { 0 } else { 1 })
}

/// The commit `revision` names in `app`'s repository, fetched into the cache, as
/// `git rev-parse` takes it relative to the app's ref: `HEAD~3` (HEAD is the app's ref),
/// `main^`, a tag, a branch or a commit id. `None` is the app's ref.
///
/// # Errors
///
/// The fetch's error ([`source::Error::RefNotFound`] for a name the repository lacks), with the
/// app's name.
async fn resolve_revision(
    git: &GitCache,
    app: &config::AppConfig,
    revision: Option<&str>,
) -> anyhow::Result<source::Fetched> {
    let name = &app.name.value;
    let (base, suffix) = match revision {
        Some(r) => match r.find(['~', '^']) {
            Some(i) => (Some(&r[..i]), &r[i..]),
            None => (Some(r), ""),
        },
        None => (None, ""),
    };
    let base = base.filter(|b| !b.is_empty() && *b != "HEAD");
    let reference = base.or(app.source.reference.as_deref());
    let mut fetched = git
        .fetch_within(&app.source.repo.value, reference, app.source.timeout.value)
        .await
        .with_context(|| format!("app {name}"))?;
    if !suffix.is_empty() {
        let relative = format!("{}{suffix}", fetched.revision);
        fetched = git
            .fetch_within(
                &app.source.repo.value,
                Some(&relative),
                app.source.timeout.value,
            )
            .await
            .with_context(|| format!("app {name}: revision {}", object::printable(&relative)))?;
    }
    Ok(fetched)
}

async fn diff_cmd(
    cfg: Loaded,
    app: Option<String>,
    revision: Option<String>,
) -> anyhow::Result<u8> {
    let store = open_store(&cfg).await?;
    let git = git_cache(&cfg)?;
    let mut changes = false;
    for app in selected_apps(&cfg, app.as_deref())? {
        let name = app.name.value.clone();
        let fetched = resolve_revision(&git, &app, revision.as_deref()).await?;
        let (_, set) = crate::render::Render::for_app(&app)
            .read(&git, &app, &fetched.revision)
            .await
            .with_context(|| format!("app {name}"))?;
        for d in &set.diagnostics {
            eprintln!("{d}");
        }
        if set.has_errors() {
            eprintln!(
                "error: app {name}: revision {} has invalid manifests; nothing to compare",
                fetched.revision.short()
            );
            return Ok(2);
        }
        let desired: BTreeMap<ObjectKey, Object> = set
            .objects
            .into_iter()
            .map(|(k, d)| (k, d.object))
            .collect();
        let outcome = crate::sync::sync(
            store.as_ref(),
            &crate::sync::Request {
                app: &name,
                revision: &fetched.revision,
                source: "diff",
                desired: &desired,
                scope: None,
                options: diff::PlanOptions {
                    prune: app.sync.prune,
                    allow_empty: app.sync.allow_empty,
                },
                dry_run: true,
                inventory: None,
                hold: None,
            },
        )
        .await
        .with_context(|| format!("app {name}"))?;
        println!("# app {name} at {}", fetched.revision);
        print!("{}", diff::render_plan(&outcome.plan));
        for (key, owner) in &outcome.conflicts {
            println!("! {key}: declared here but owned by app {owner}; not applied");
        }
        let s = outcome.plan.summary();
        // A write held back (a delete `prune: false` keeps) is still a difference: the app
        // reads OutOfSync for it, as Argo CD does (`RequiresPruning`).
        changes |= s.create + s.update + s.delete + s.skipped > 0;
    }
    Ok(if changes { 1 } else { 0 })
}

/// A duration on the command line (`30s`, `5m`, `2h`), at most [`crate::config::MAX_DURATION`]
/// (100 years), as in the config file.
fn bounded_duration(s: &str) -> Result<std::time::Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d > crate::config::MAX_DURATION {
        return Err("longer than 100 years".into());
    }
    Ok(d)
}

/// Reads a file or standard input (`-`), naming it for diagnostics.
fn read_input(file: &Path) -> anyhow::Result<(String, Vec<u8>)> {
    if file.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .context("cannot read standard input")?;
        Ok(("<stdin>".to_string(), buf))
    } else {
        let bytes =
            std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
        Ok((file.display().to_string(), bytes))
    }
}

/// The objects of a file, printing its diagnostics; `None` when it cannot be read or has errors.
fn objects_of(file: &Path, mode: manifest::Mode) -> Option<Vec<Object>> {
    let (shown, bytes) = match read_input(file) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("error: {e:#}");
            return None;
        }
    };
    let parsed = manifest::parse_file_with(&shown, &bytes, mode);
    for d in &parsed.diagnostics {
        eprintln!("{d}");
    }
    if parsed.diagnostics.iter().any(Diagnostic::is_error) {
        return None;
    }
    Some(parsed.objects.into_iter().map(|d| d.object).collect())
}

/// kubectl's last-applied copy in a live object's annotation, when it names the same object.
fn kubectl_last_applied(live: &Object) -> Option<Object> {
    live.metadata()
        .get("annotations")
        .and_then(|a| a.get("kubectl.kubernetes.io/last-applied-configuration"))
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .and_then(|v| Object::from_value(v).ok())
        .map(|mut o| {
            if o.namespace().is_empty() {
                o.set_namespace(live.namespace());
            }
            o
        })
        .filter(|o| o.key() == live.key())
}

/// `driftless diff --desired FILE --live FILE`: each declared object against the live object
/// of the same key, by the drift rules. 0 no drift, 1 drift (or a declared object missing from
/// the live file), 2 error.
fn diff_offline(desired: &Path, live: &Path) -> u8 {
    let (Some(mut wants), Some(haves)) = (
        objects_of(desired, manifest::Mode::Git),
        objects_of(live, manifest::Mode::Live),
    ) else {
        return 2;
    };
    // A declaration without a namespace lands where the live object of that name is (the
    // app's target), or in `default`.
    for want in &mut wants {
        if want.namespace().is_empty()
            && !crate::object::is_cluster_scoped(want.group(), want.kind())
        {
            let mut same_name = haves.iter().filter(|h| {
                h.group() == want.group() && h.kind() == want.kind() && h.name() == want.name()
            });
            let ns = match (same_name.next(), same_name.next()) {
                (Some(h), None) => h.namespace().to_string(),
                _ => "default".to_string(),
            };
            want.set_namespace(&ns);
        }
    }
    if let ([want], [have]) = (wants.as_slice(), haves.as_slice())
        && want.key() != have.key()
    {
        eprintln!(
            "error: not the same object: {} and {}",
            want.key(),
            have.key()
        );
        return 2;
    }
    let live: BTreeMap<ObjectKey, &Object> = haves.iter().map(|h| (h.key(), h)).collect();
    let mut drift = false;
    for want in &wants {
        let key = want.key();
        let have = live.get(&key).copied();
        let last_applied = have.and_then(kubectl_last_applied);
        let step = diff::plan_one(&key, want, have, last_applied.as_ref());
        if step.action == diff::Action::Unchanged {
            println!("no drift: {key}");
            continue;
        }
        drift = true;
        if have.is_none() {
            println!("missing from the live objects: {key}");
            continue;
        }
        for c in &step.changes {
            let show =
                |v: &Option<Value>| v.as_ref().map_or("(absent)".to_string(), |v| v.to_string());
            println!("{}: {} -> {}", c.path, show(&c.live), show(&c.desired));
        }
        print!("{}", diff::render_step(&step));
    }
    let declared: BTreeSet<ObjectKey> = wants.iter().map(Object::key).collect();
    for key in live.keys().filter(|k| !declared.contains(*k)) {
        println!("not declared (offline there is no inventory, so nothing is pruned): {key}");
    }
    u8::from(drift)
}

/// `driftless health -f FILE`.
fn health_cmd(cfg: Loaded, file: &Path, output: StatusFormat) -> anyhow::Result<u8> {
    let rules = health_rules(&cfg)?;
    let (shown, bytes) = read_input(file)?;
    let parsed = manifest::parse_file_with(&shown, &bytes, manifest::Mode::Live);
    for d in &parsed.diagnostics {
        eprintln!("{d}");
    }
    if parsed.diagnostics.iter().any(Diagnostic::is_error) {
        return Ok(2);
    }
    let assessed: Vec<(Object, health::Assessment)> = parsed
        .objects
        .into_iter()
        .map(|d| {
            let a = health::assess(Some(&d.object), &rules);
            (d.object, a)
        })
        .collect();
    match output {
        StatusFormat::Json => {
            let objects: Vec<Value> = assessed
                .iter()
                .map(|(o, a)| {
                    serde_json::json!({
                        "group": o.group(), "version": o.version(), "kind": o.kind(),
                        "namespace": o.namespace(), "name": o.name(),
                        "health": a.health, "message": a.message,
                    })
                })
                .collect();
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({ "objects": objects }))?
            );
        }
        StatusFormat::Table | StatusFormat::Wide => {
            for (o, a) in &assessed {
                if a.message.is_empty() {
                    println!("{}: {}", o.key(), a.health);
                } else {
                    println!("{}: {}: {}", o.key(), a.health, a.message);
                }
            }
        }
    }
    Ok(0)
}

/// `driftless wait`: polls the app's status record.
async fn wait_cmd(
    cfg: Loaded,
    app: &str,
    conditions: &[String],
    revision: Option<&str>,
    timeout: std::time::Duration,
) -> anyhow::Result<u8> {
    for c in conditions {
        if !matches!(c.as_str(), "synced" | "healthy") {
            bail!("unknown condition `{c}` in --for: use synced, healthy");
        }
    }
    // An app that is not configured would never get there: say so now.
    let app_cfg = selected_apps(&cfg, Some(app))?.remove(0);
    // A commit id (or its prefix) is compared as given; any other name (a branch, a tag,
    // `HEAD~1`) is resolved in the app's repository first, as `diff --revision` does.
    let resolved: Option<String> = match revision {
        // A prefix cannot be looked up without the whole id; a whole id can: one the
        // repository does not have fails now, not at the timeout.
        Some(r) if r.len() >= 4 && r.len() < 40 && r.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Some(r.to_ascii_lowercase())
        }
        Some(r) => {
            let fetched = resolve_revision(&git_cache(&cfg)?, &app_cfg, Some(r)).await?;
            eprintln!("{} is {}", object::printable(r), fetched.revision.0);
            Some(fetched.revision.0)
        }
        None => None,
    };
    let revision = resolved.as_deref();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut store: Option<Arc<dyn Store>> = None;
    let mut last = String::from("no status recorded yet");
    loop {
        if store.is_none()
            && (cfg.config.store.etcd.is_some() || cfg.sqlite_path().is_some_and(Path::exists))
        {
            store = Some(open_store(&cfg).await?);
        }
        if let Some(s) = &store {
            match status::read(s.as_ref(), app).await {
                Ok(Some(st)) => {
                    let synced = st.sync == SyncStatus::Synced;
                    let healthy = st.health == crate::health::Health::Healthy;
                    let at_revision = revision.is_none_or(|r| {
                        st.revision
                            .as_deref()
                            .is_some_and(|have| have.starts_with(r))
                    });
                    let ok = at_revision
                        && conditions.iter().all(|c| match c.as_str() {
                            "synced" => synced,
                            _ => healthy,
                        });
                    let ready = st
                        .condition(ConditionType::Ready)
                        .map(|c| format!("{}: {}", c.reason, c.message))
                        .unwrap_or_default();
                    // What is missing, and why: the condition that says so.
                    let mut missing = Vec::new();
                    if let Some(r) = revision.filter(|_| !at_revision) {
                        missing.push(format!("not at revision {r} yet"));
                    }
                    if conditions.iter().any(|c| c == "synced") && !synced {
                        missing.push(format!("not synced ({ready})"));
                    }
                    if conditions.iter().any(|c| c == "healthy") && !healthy {
                        let why = st
                            .condition(ConditionType::Healthy)
                            .map(|c| format!("{}: {}", c.reason, c.message))
                            .unwrap_or_else(|| st.health.to_string());
                        missing.push(format!("not healthy ({why})"));
                    }
                    last = format!(
                        "{app} is {} and {} at {}; {}",
                        st.sync,
                        st.health,
                        st.revision.as_deref().unwrap_or("no revision"),
                        if missing.is_empty() {
                            ready
                        } else {
                            missing.join("; ")
                        }
                    );
                    if ok {
                        println!("{last}");
                        return Ok(0);
                    }
                    // The revision waited for was refused as it stands (it does not parse, its
                    // path is missing, its signature is rejected, it would prune everything):
                    // no retry will change that, only a new commit. Say so now.
                    let attempted = st.last_attempted_revision.as_deref();
                    let refused = st.condition(ConditionType::Ready).filter(|c| {
                        matches!(
                            c.reason,
                            Reason::InvalidManifest
                                | Reason::PathNotFound
                                | Reason::SignatureRejected
                                | Reason::PruneBlocked
                        )
                    });
                    if let (Some(c), Some(attempted)) = (refused, attempted)
                        && attempted != st.revision.as_deref().unwrap_or_default()
                        && revision.is_none_or(|r| attempted.starts_with(r))
                    {
                        println!(
                            "revision {attempted} will not be applied ({}: {}); a new commit is needed",
                            c.reason, c.message
                        );
                        return Ok(1);
                    }
                }
                Ok(None) => last = format!("no status recorded for {app} yet"),
                Err(e) => last = format!("cannot read the store: {e}"),
            }
        }
        if tokio::time::Instant::now() >= deadline {
            println!(
                "timed out after {}: {last}",
                humantime::format_duration(timeout)
            );
            return Ok(1);
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

async fn status_cmd(cfg: Loaded, output: StatusFormat) -> anyhow::Result<u8> {
    let store = open_existing_store(&cfg).await?;
    let mut apps = status::read_all(store.as_ref()).await?;
    // A configured app with no status record yet (no agent or sync has run it) is listed too.
    for a in &cfg.config.apps {
        if !apps.iter().any(|s| s.name == a.name.value) {
            let mut s = status::AppStatus::new(&a.name.value);
            let now = crate::store::now_rfc3339();
            crate::status::set_condition(
                &mut s.conditions,
                ConditionType::Ready,
                false,
                Reason::NotSyncedYet,
                "no agent or sync has run this app yet",
                &now,
            );
            apps.push(s);
        }
    }
    apps.sort_by(|a, b| a.name.cmp(&b.name));
    let holders = holders(&cfg).await?;
    match output {
        StatusFormat::Json => {
            let mut list = serde_json::to_value(&apps)?;
            if let (Some(holders), Some(items)) = (&holders, list.as_array_mut()) {
                for item in items {
                    let name = item["name"].as_str().unwrap_or_default().to_string();
                    if let Some(map) = item.as_object_mut() {
                        map.insert(
                            "replica".into(),
                            holders.get(&name).map_or(Value::Null, |r| r.clone().into()),
                        );
                    }
                }
            }
            let v = serde_json::json!({ "apps": list });
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        StatusFormat::Table | StatusFormat::Wide => {
            // The REPLICA column only with etcd replicas.
            let mut rows = vec![vec![
                "NAME".to_string(),
                "SYNC".into(),
                "HEALTH".into(),
                "REVISION".into(),
                "OUT-OF-SYNC-SINCE".into(),
                "REPLICA".into(),
                "MESSAGE".into(),
            ]];
            for a in &apps {
                let ready = a.condition(ConditionType::Ready);
                let replica = match &holders {
                    None => "-".to_string(),
                    Some(h) => h.get(&a.name).cloned().unwrap_or_else(|| "(none)".into()),
                };
                rows.push(vec![
                    a.name.clone(),
                    a.sync.to_string(),
                    a.health.to_string(),
                    a.revision
                        .as_deref()
                        .map_or("-".into(), |r| r.chars().take(12).collect()),
                    a.out_of_sync_since.clone().unwrap_or_else(|| "-".into()),
                    replica,
                    ready.map_or(String::new(), |c| {
                        let m = format!("{}: {}", c.reason, c.message);
                        if output == StatusFormat::Wide {
                            m
                        } else {
                            truncated(&m, MESSAGE_WIDTH)
                        }
                    }),
                ]);
            }
            if holders.is_none() {
                for r in &mut rows {
                    r.remove(5);
                }
            }
            print_table(&rows);
        }
    }
    Ok(0)
}

/// With etcd: which replica holds each app (app name to replica name). `None` for SQLite,
/// where one agent holds every app.
async fn holders(cfg: &Loaded) -> anyhow::Result<Option<BTreeMap<String, String>>> {
    if cfg.config.store.etcd.is_none() {
        return Ok(None);
    }
    #[cfg(feature = "etcd")]
    {
        let etcd = open_etcd(cfg).await?;
        match crate::store::etcd::holders(&etcd).await {
            Ok(h) => Ok(Some(h.into_iter().map(|(k, v)| (k, v.replica)).collect())),
            Err(e) => {
                // The statuses are still worth showing.
                eprintln!(
                    "warning: cannot read which replica holds each app: {}",
                    crate::reconcile::error_chain(&e)
                );
                Ok(Some(
                    cfg.config
                        .apps
                        .iter()
                        .map(|a| (a.name.value.clone(), "?".to_string()))
                        .collect(),
                ))
            }
        }
    }
    #[cfg(not(feature = "etcd"))]
    Ok(None)
}

/// Prints rows as aligned columns. Control characters in a cell (a newline that would forge a
/// row, a terminal escape) are shown escaped (`\n`, `\u{1b}`), never raw.
fn print_table<R: AsRef<[String]>>(rows: &[R]) {
    let n = rows.first().map_or(0, |r| r.as_ref().len());
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.as_ref().iter().map(|c| object::printable(c)).collect())
        .collect();
    let mut widths = vec![0usize; n];
    for r in &rows {
        for (i, c) in r.iter().enumerate().take(n) {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = std::io::stdout().lock();
    for r in &rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate().take(n) {
            if i + 1 == n {
                line.push_str(c);
            } else {
                line.push_str(&format!("{c:<w$}   ", w = widths[i]));
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

/// `driftless validate`: parse files and folders, print diagnostics, exit 1 on errors.
fn validate(paths: &[PathBuf]) -> u8 {
    // Each PATH is its own desired set, as each app's folder is: an object declared in two
    // of them is not a duplicate.
    let (mut files_n, mut objects, mut skipped, mut errors, mut warnings) = (0, 0, 0, 0, 0);
    for p in paths {
        let mut files: Vec<(String, Vec<u8>)> = Vec::new();
        let mut prior = Vec::new();
        collect_files(p, &mut files, &mut prior);
        let set = crate::render::Render::default().render(source::Files {
            files,
            diagnostics: prior,
            ..Default::default()
        });
        for d in &set.diagnostics {
            println!("{d}");
        }
        let e = set.diagnostics.iter().filter(|d| d.is_error()).count();
        errors += e;
        warnings += set.diagnostics.len() - e;
        files_n += set.files;
        objects += set.objects.len();
        skipped += set.skipped;
    }
    eprintln!(
        "{files_n} file(s), {objects} object(s), {skipped} skipped, {errors} error(s), {warnings} warning(s)"
    );
    if errors > 0 { 1 } else { 0 }
}

/// Collects the files `validate` reads for one argument. A file named on the command line is
/// read whatever its name (if it is a regular file). A folder is read as the agent reads an
/// app's folder in Git: `*.yaml`, `*.yml` and `*.json` recursively, a symlink followed only
/// when its target stays inside the folder (any other link is an error on the link's path and
/// its target is never read), a folder reached twice through links is a cycle, and anything
/// that is not a regular file (a FIFO, a device) is an error.
fn collect_files(path: &Path, files: &mut Vec<(String, Vec<u8>)>, diags: &mut Vec<Diagnostic>) {
    let shown = path.display().to_string();
    if path.is_dir() {
        match std::fs::canonicalize(path) {
            Ok(root) => {
                let mut visiting = std::collections::HashSet::new();
                walk_folder(&root, path, &shown, &mut visiting, files, diags);
            }
            Err(e) => diags.push(Diagnostic::error(
                &shown,
                1,
                1,
                format!("cannot read folder: {e}"),
            )),
        }
        return;
    }
    read_regular_file(path, shown, files, diags);
}

fn read_regular_file(
    path: &Path,
    shown: String,
    files: &mut Vec<(String, Vec<u8>)>,
    diags: &mut Vec<Diagnostic>,
) {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => match std::fs::read(path) {
            Ok(bytes) => files.push((shown, bytes)),
            Err(e) => diags.push(Diagnostic::error(
                &shown,
                1,
                1,
                format!("cannot read file: {e}"),
            )),
        },
        Ok(_) => diags.push(Diagnostic::error(
            &shown,
            1,
            1,
            "not a regular file; not read",
        )),
        Err(e) => diags.push(Diagnostic::error(
            &shown,
            1,
            1,
            format!("cannot read file: {e}"),
        )),
    }
}

fn walk_folder(
    root: &Path,
    dir: &Path,
    shown: &str,
    visiting: &mut std::collections::HashSet<PathBuf>,
    files: &mut Vec<(String, Vec<u8>)>,
    diags: &mut Vec<Diagnostic>,
) {
    let real = match std::fs::canonicalize(dir) {
        Ok(r) => r,
        Err(e) => {
            diags.push(Diagnostic::error(
                shown,
                1,
                1,
                format!("cannot read folder: {e}"),
            ));
            return;
        }
    };
    if !visiting.insert(real.clone()) {
        diags.push(Diagnostic::error(
            shown,
            1,
            1,
            format!("symlink `{shown}` leads back into a folder it is in (a cycle); remove it"),
        ));
        return;
    }
    let mut children: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(e) => {
            diags.push(Diagnostic::error(
                shown,
                1,
                1,
                format!("cannot read folder: {e}"),
            ));
            visiting.remove(&real);
            return;
        }
    };
    children.sort();
    for child in children {
        let name = child
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let child_shown = format!("{}/{name}", shown.trim_end_matches('/'));
        let Ok(lmeta) = std::fs::symlink_metadata(&child) else {
            continue;
        };
        if lmeta.is_symlink() {
            let target = std::fs::read_link(&child)
                .map(|t| t.display().to_string())
                .unwrap_or_default();
            match std::fs::canonicalize(&child) {
                Err(_) => diags.push(Diagnostic::error(
                    &child_shown,
                    1,
                    1,
                    format!("symlink `{child_shown}` points to `{target}`, which does not exist"),
                )),
                Ok(dest) if !dest.starts_with(root) => diags.push(Diagnostic::error(
                    &child_shown,
                    1,
                    1,
                    format!("symlink `{child_shown}` points outside the folder (`{target}`); it is not followed"),
                )),
                Ok(dest) if dest.is_dir() => walk_folder(root, &child, &child_shown, visiting, files, diags),
                Ok(_) if Renderer::Plain.wants(&name) => read_regular_file(&child, child_shown, files, diags),
                Ok(_) => {}
            }
        } else if lmeta.is_dir() {
            walk_folder(root, &child, &child_shown, visiting, files, diags);
        } else if Renderer::Plain.wants(&name) {
            read_regular_file(&child, child_shown, files, diags);
        }
    }
    visiting.remove(&real);
}

/// A `KIND[.GROUP]` argument.
#[derive(Debug, PartialEq, Eq)]
struct KindSpec {
    kind: String,
    group: Option<String>,
}

impl KindSpec {
    fn parse(s: &str) -> Self {
        match s.split_once('.') {
            Some((k, g)) => KindSpec {
                kind: k.to_string(),
                group: Some(if g == "core" {
                    String::new()
                } else {
                    g.to_string()
                }),
            },
            None => KindSpec {
                kind: s.to_string(),
                group: None,
            },
        }
    }

    /// Kind matches case-insensitively, plural forms (`configmaps`, `ingresses`) too, and with
    /// `short` kubectl's short names (`deploy`, `svc`, `cm`...); see [`KindSpec::resolve`] for
    /// which wins.
    fn matches_as(&self, key: &ObjectKey, short: bool) -> bool {
        let want = self.kind.to_ascii_lowercase();
        let want = if short {
            short_name(&want).unwrap_or(&want).to_string()
        } else {
            want
        };
        let have = key.kind.to_ascii_lowercase();
        let kind_ok = want == have
            || want.strip_suffix('s') == Some(have.as_str())
            || want.strip_suffix("es") == Some(have.as_str())
            || want
                .strip_suffix("ies")
                .is_some_and(|stem| have.strip_suffix('y') == Some(stem));
        kind_ok && self.group.as_ref().is_none_or(|g| *g == key.group)
    }
}

impl KindSpec {
    /// The keys among `keys` this spec names, as kubectl resolves a resource name: a kind
    /// spelled out (any case, or plural) wins over a short name that happens to match (`cm`
    /// naming a custom kind `Cm`); without a group, a kind of the core group wins over the same
    /// kind in another group.
    fn resolve<'k>(&self, keys: impl Iterator<Item = &'k ObjectKey> + Clone) -> Vec<&'k ObjectKey> {
        let exact: Vec<&ObjectKey> = keys.clone().filter(|k| self.matches_as(k, false)).collect();
        let found = if exact.is_empty() {
            keys.filter(|k| self.matches_as(k, true)).collect()
        } else {
            exact
        };
        if self.group.is_none() && found.iter().any(|k| k.group.is_empty()) {
            found.into_iter().filter(|k| k.group.is_empty()).collect()
        } else {
            found
        }
    }
}

/// A hint for a kind named without its group that is one of driftless's own records
/// (`Inventory`, `AppStatus`, `Ownership`, `Preview`), which are listed only when their group
/// `driftless.io` is named.
fn reserved_kind_hint(kind: &str) -> Option<String> {
    let spec = KindSpec::parse(kind);
    if spec.group.is_some() {
        return None;
    }
    [
        crate::sync::INVENTORY_KIND,
        crate::status::KIND,
        crate::sync::OWNERSHIP_KIND,
        crate::preview::KIND,
    ]
    .into_iter()
    .find(|k| spec.matches_as(&ObjectKey::new(object::RESERVED_GROUP, *k, "", "x"), false))
    .map(|k| {
        format!(
            "note: driftless keeps its own records in group {group}: name it as `{}.{group}`",
            k.to_ascii_lowercase(),
            group = object::RESERVED_GROUP
        )
    })
}

/// kubectl's short names of built-in kinds (`kubectl api-resources`), lowercase.
fn short_name(s: &str) -> Option<&'static str> {
    Some(match s {
        "cm" => "configmap",
        "cj" => "cronjob",
        "crd" | "crds" => "customresourcedefinition",
        "deploy" => "deployment",
        "ds" => "daemonset",
        "ep" => "endpoints",
        "hpa" => "horizontalpodautoscaler",
        "ing" => "ingress",
        "limits" => "limitrange",
        "netpol" => "networkpolicy",
        "no" => "node",
        "ns" => "namespace",
        "pc" => "priorityclass",
        "pdb" => "poddisruptionbudget",
        "po" => "pod",
        "pv" => "persistentvolume",
        "pvc" => "persistentvolumeclaim",
        "quota" => "resourcequota",
        "rc" => "replicationcontroller",
        "rs" => "replicaset",
        "sa" => "serviceaccount",
        "sc" => "storageclass",
        "sts" => "statefulset",
        "svc" => "service",
        _ => return None,
    })
}

/// A stored record `store get` and `store delete` found: an object, or a record whose stored
/// value is not a valid object (with why), which `store delete` can still remove.
#[derive(Clone)]
enum Found {
    Object(Object),
    Unreadable(ObjectKey, String),
}

impl Found {
    fn key(&self) -> ObjectKey {
        match self {
            Found::Object(o) => o.key(),
            Found::Unreadable(k, _) => k.clone(),
        }
    }
}

async fn find(
    store: &dyn Store,
    kind: &KindSpec,
    name: &str,
    namespace: Option<&str>,
) -> anyhow::Result<Vec<Found>> {
    let listing = store
        .list(&Selector {
            group: kind.group.clone(),
            kind: None,
            namespace: None,
        })
        .await?;
    let named: Vec<&ObjectKey> = listing
        .objects
        .keys()
        .chain(listing.unreadable.keys())
        .filter(|k| k.name == name)
        .collect();
    let wanted: BTreeSet<ObjectKey> = kind
        .resolve(named.iter().copied())
        .into_iter()
        .cloned()
        .collect();
    let matching: Vec<Found> = listing
        .objects
        .into_iter()
        .filter(|(k, _)| wanted.contains(k))
        .map(|(_, o)| Found::Object(o))
        .chain(
            listing
                .unreadable
                .into_iter()
                .filter(|(k, _)| wanted.contains(k))
                .map(|(k, why)| Found::Unreadable(k, why)),
        )
        .collect();
    let in_ns = |ns: &str| -> Vec<Found> {
        matching
            .iter()
            .filter(|f| f.key().namespace == ns)
            .cloned()
            .collect()
    };
    let found = match namespace {
        // kubectl ignores -n for a cluster-scoped object.
        Some(ns) => {
            let n = in_ns(ns);
            if n.is_empty() { in_ns("") } else { n }
        }
        None => {
            let d = in_ns("default");
            if d.is_empty() { in_ns("") } else { d }
        }
    };
    // Not here: say where that name exists, as a hint.
    if found.is_empty() && !matching.is_empty() {
        let elsewhere: BTreeSet<String> = matching
            .iter()
            .map(|f| f.key().namespace)
            .filter(|ns| !ns.is_empty())
            .collect();
        if !elsewhere.is_empty() {
            let list: Vec<String> = elsewhere.into_iter().collect();
            eprintln!(
                "note: it exists in namespace(s) {}: pass -n NAMESPACE",
                object::printable(&list.join(", "))
            );
        }
    }
    Ok(found)
}

/// The one object `KIND[.GROUP] NAME` names, or `None` (said on standard error) when there is
/// none.
///
/// # Errors
///
/// A store error, or an ambiguous name (the same kind and name in two groups).
async fn find_one(
    store: &dyn Store,
    kind: &str,
    name: Option<&str>,
    namespace: Option<&str>,
) -> anyhow::Result<Option<Found>> {
    let (kind, name) = kind_and_name(kind, name)?;
    let mut found = find(store, &KindSpec::parse(kind), name, namespace).await?;
    match found.len() {
        0 => {
            eprintln!("{kind} {name} not found");
            if let Some(hint) = reserved_kind_hint(kind) {
                eprintln!("{hint}");
            }
            Ok(None)
        }
        1 => Ok(found.pop()),
        _ => {
            let keys: Vec<String> = found.iter().map(|f| f.key().to_string()).collect();
            bail!(
                "`{kind} {name}` is ambiguous: {}; name the group as KIND.GROUP",
                keys.join(", ")
            )
        }
    }
}

/// `KIND NAME` or kubectl's `KIND/NAME` as one argument.
///
/// # Errors
///
/// Both forms at once, or neither.
fn kind_and_name<'a>(kind: &'a str, name: Option<&'a str>) -> anyhow::Result<(&'a str, &'a str)> {
    match (kind.split_once('/'), name) {
        (Some((k, n)), None) if !k.is_empty() && !n.is_empty() => Ok((k, n)),
        (None, Some(n)) => Ok((kind, n)),
        (Some(_), Some(_)) => bail!(
            "`{}` already names the object as KIND/NAME: drop the second argument",
            object::printable(kind)
        ),
        _ => bail!(
            "name the object: `KIND NAME` or `KIND/NAME` (got `{}`)",
            object::printable(kind)
        ),
    }
}

fn print_object(value: &Value, format: ObjectFormat) -> anyhow::Result<()> {
    match format {
        ObjectFormat::Json => println!("{}", serde_json::to_string_pretty(value)?),
        ObjectFormat::Yaml => print!("{}", diff::to_yaml(value)),
    }
    Ok(())
}

async fn store_cmd(cfg: Loaded, cmd: StoreCommand) -> anyhow::Result<u8> {
    let store = if matches!(cmd, StoreCommand::Put { .. }) {
        open_store(&cfg).await?
    } else {
        open_existing_store(&cfg).await?
    };
    match cmd {
        StoreCommand::List {
            kind,
            namespace,
            all_namespaces: _,
            output,
        } => {
            let specs: Option<Vec<KindSpec>> = kind.as_deref().map(|k| {
                k.split(',')
                    .filter(|k| !k.is_empty())
                    .map(KindSpec::parse)
                    .collect()
            });
            // One group for every kind named narrows the listing; otherwise list them all.
            let group = match specs.as_deref() {
                Some([first, rest @ ..]) if rest.iter().all(|s| s.group == first.group) => {
                    first.group.clone()
                }
                _ => None,
            };
            // With kinds named, -n does not hide cluster-scoped ones (kubectl ignores -n for
            // them): list every namespace and keep those objects.
            let listing = store
                .list(&Selector {
                    group,
                    kind: None,
                    namespace: namespace.clone().filter(|_| specs.is_none()),
                })
                .await?;
            let in_namespace = |k: &ObjectKey| {
                namespace
                    .as_deref()
                    .is_none_or(|ns| k.namespace == ns || k.namespace.is_empty())
            };
            let wanted: Option<BTreeSet<ObjectKey>> = specs.as_ref().map(|specs| {
                specs
                    .iter()
                    .flat_map(|s| {
                        s.resolve(listing.objects.keys().chain(listing.unreadable.keys()))
                    })
                    .filter(|k| in_namespace(k))
                    .cloned()
                    .collect()
            });
            let objects: Vec<Object> = listing
                .objects
                .into_iter()
                .filter(|(k, _)| wanted.as_ref().is_none_or(|w| w.contains(k)))
                .map(|(_, o)| o)
                .collect();
            if let (Some(k), true) = (&kind, objects.is_empty()) {
                eprintln!(
                    "note: no objects of kind `{}`{}",
                    object::printable(k),
                    namespace.as_deref().map_or(String::new(), |ns| format!(
                        " in namespace {}",
                        object::printable(ns)
                    ))
                );
                for hint in k.split(',').filter_map(reserved_kind_hint) {
                    eprintln!("{hint}");
                }
            }
            // Bad records are named, not allowed to hide the good ones.
            for (key, why) in listing
                .unreadable
                .iter()
                .filter(|(k, _)| wanted.as_ref().is_none_or(|w| w.contains(k)))
            {
                tracing::warn!(record = %key, error = %why, "Stored record unreadable");
                eprintln!(
                    "warning: {}: the stored record is unreadable ({}); `driftless store delete` removes it",
                    object::printable(&key.to_string()),
                    object::printable(why)
                );
            }
            match output {
                Some(format) => {
                    let list = serde_json::json!({
                        "apiVersion": "v1",
                        "kind": "List",
                        "items": objects.into_iter().map(Value::from).collect::<Vec<_>>(),
                    });
                    print_object(&list, format)?;
                }
                None => {
                    let mut rows = vec![[
                        "NAMESPACE".to_string(),
                        "KIND".into(),
                        "NAME".into(),
                        "RESOURCEVERSION".into(),
                        "GENERATION".into(),
                    ]];
                    for o in &objects {
                        rows.push([
                            if o.namespace().is_empty() {
                                "-".into()
                            } else {
                                o.namespace().to_string()
                            },
                            o.key().kind_group(),
                            o.name().to_string(),
                            o.resource_version().map_or("-".into(), |r| r.to_string()),
                            o.generation().to_string(),
                        ]);
                    }
                    print_table(&rows);
                }
            }
            Ok(0)
        }
        StoreCommand::Get {
            kind,
            name,
            namespace,
            output,
        } => match find_one(store.as_ref(), &kind, name.as_deref(), namespace.as_deref()).await? {
            None => Ok(1),
            Some(Found::Object(one)) => {
                print_object(&Value::from(one), output)?;
                Ok(0)
            }
            Some(Found::Unreadable(key, why)) => bail!(
                "{}: the stored record is unreadable ({why}); `driftless store delete` removes it",
                object::printable(&key.to_string())
            ),
        },
        StoreCommand::Put { file, namespace } => {
            let (shown, bytes) = if file.as_os_str() == "-" {
                let mut buf = Vec::new();
                std::io::stdin()
                    .read_to_end(&mut buf)
                    .context("cannot read standard input")?;
                ("<stdin>".to_string(), buf)
            } else {
                let bytes = std::fs::read(&file)
                    .with_context(|| format!("cannot read {}", file.display()))?;
                (file.display().to_string(), bytes)
            };
            let parsed = manifest::parse_file(&shown, &bytes);
            let mut failed = false;
            for d in &parsed.diagnostics {
                eprintln!("{d}");
                failed |= d.is_error();
            }
            if failed {
                eprintln!("error: nothing written");
                return Ok(1);
            }
            let ns = namespace.unwrap_or_else(|| "default".into());
            if let Some(problem) = object::dns1123_label_error(&ns) {
                bail!("invalid namespace `{ns}` given with -n: {problem}");
            }
            let mut writes = Vec::new();
            for d in parsed.objects {
                let mut o = d.object;
                if o.namespace().is_empty() && !object::is_cluster_scoped(o.group(), o.kind()) {
                    o.set_namespace(&ns);
                }
                // A resourceVersion makes the write conditional; one that is not a number must
                // not silently turn it into an unconditional overwrite.
                let precondition = match o.metadata().get("resourceVersion") {
                    None | Some(Value::Null) => Precondition::Any,
                    Some(Value::String(s)) if s.is_empty() => Precondition::Any,
                    Some(raw) => match o.resource_version() {
                        Some(rv) => Precondition::ResourceVersion(rv),
                        None => bail!(
                            "{}:{}:{}: metadata.resourceVersion {raw} is not a resourceVersion (a decimal number); remove it to write unconditionally; nothing written",
                            d.path,
                            d.line,
                            d.column
                        ),
                    },
                };
                writes.push(Write::Put {
                    object: o,
                    precondition,
                });
            }
            let committed = store.commit(writes).await?;
            for o in &committed.stored {
                println!(
                    "{} written (resourceVersion {})",
                    o.key(),
                    committed.revision
                );
            }
            Ok(0)
        }
        StoreCommand::Delete {
            kind,
            name,
            namespace,
        } => match find_one(store.as_ref(), &kind, name.as_deref(), namespace.as_deref()).await? {
            None => Ok(1),
            Some(found) => {
                let key = found.key();
                let precondition = match &found {
                    Found::Object(one) => Precondition::matching(Some(one)),
                    // Its body does not parse; its version is read apart from it.
                    Found::Unreadable(..) => match store.version_of(&key).await? {
                        Some(rv) => Precondition::ResourceVersion(rv),
                        None => Precondition::Any,
                    },
                };
                store
                    .commit(vec![Write::Delete { key, precondition }])
                    .await?;
                println!("{} deleted", object::printable(&found.key().to_string()));
                Ok(0)
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_cells_never_carry_raw_control_characters() {
        assert_eq!(object::printable("plain"), "plain");
        assert_eq!(
            object::printable("evil\nconfigmap  forged\u{1b}[2J\0"),
            "evil\\nconfigmap  forged\\u{1b}[2J\\u{0}"
        );
    }

    #[test]
    fn kind_specs_match_case_insensitively_with_plurals_and_groups() {
        let dep = ObjectKey::new("apps", "Deployment", "d", "x");
        let ing = ObjectKey::new("networking.k8s.io", "Ingress", "d", "x");
        let cm = ObjectKey::new("", "ConfigMap", "d", "x");
        assert!(KindSpec::parse("deployment").matches_as(&dep, true));
        assert!(KindSpec::parse("Deployments.apps").matches_as(&dep, true));
        assert!(!KindSpec::parse("deployment.extensions").matches_as(&dep, true));
        assert!(KindSpec::parse("ingresses").matches_as(&ing, true));
        assert!(KindSpec::parse("ingress.networking.k8s.io").matches_as(&ing, true));
        assert!(KindSpec::parse("configmap.core").matches_as(&cm, true));
        assert!(!KindSpec::parse("config").matches_as(&cm, true));
        assert!(KindSpec::parse("deploy").matches_as(&dep, true));
        let np = ObjectKey::new("networking.k8s.io", "NetworkPolicy", "d", "x");
        assert!(KindSpec::parse("networkpolicies").matches_as(&np, true));
        assert!(KindSpec::parse("CM").matches_as(&cm, true));
        assert!(KindSpec::parse("ing.networking.k8s.io").matches_as(&ing, true));
    }
}
