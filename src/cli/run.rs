//! `driftless run`: the agent (apps, previews, the HTTP server, the store watch) until a
//! signal.

use super::*;

pub(super) async fn run(cfg: Loaded) -> anyhow::Result<u8> {
    // Listen first, before anything is created on disk: a start that fails (the port is taken)
    // leaves no new files. While the store is still unreachable (etcd starting), /healthz
    // answers (the process is alive, so a liveness probe does not restart it) and /readyz says
    // why it is not ready. The full server takes the same socket over afterwards.
    let server = &cfg.config.server;
    let socket = std::net::TcpListener::bind(server.listen.value.as_str())
        .with_context(|| format!("cannot listen on {} (server.listen)", server.listen.value))?;
    let store = open_store(&cfg).await?;
    // One agent per SQLite store; etcd and Kubernetes replicas share apps through leases
    // instead.
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
    // From here on a signal stops the agent cleanly, even one that comes before the agent has
    // started (its first pass is a few ms away when the set is taken up).
    let mut signals = Signals::listen()?;
    // SQLite and etcd: the periodic passes ask the objects' versions of a cache the change
    // feed keeps (store::cached) instead of reading them from the store each time; both feeds
    // send the bookmarks it needs to know it is current (etcd's from its progress
    // notifications). Kubernetes has its own watch cache.
    let cache = if cfg.sqlite_path().is_some() || cfg.config.store.etcd.is_some() {
        Some(
            crate::store::cached::VersionCache::wrap(store.clone())
                .await
                .context("cannot read the store's revision")?,
        )
    } else {
        None
    };
    let store: Arc<dyn Store> = match &cache {
        Some(c) => Arc::new(c.clone()),
        None => store,
    };
    // The replicas give their apps back only once the app loops have stopped, so a reconcile
    // in progress is not cut off by its own fence.
    #[cfg(any(feature = "etcd", feature = "kubernetes"))]
    let (release_tx, release_rx) = tokio::sync::watch::channel(false);
    #[cfg(any(feature = "etcd", feature = "kubernetes"))]
    let (stores, replicas) = replicas(&cfg, &store, cache.as_ref(), release_rx).await?;
    #[cfg(not(any(feature = "etcd", feature = "kubernetes")))]
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
    let shared = Shared {
        stores: &stores,
        git: &git,
        metrics: Some(&metrics),
        queue: &queue,
        claim: &claim,
    };
    let apps = load_apps(&cfg, &shared, None, false).await?;
    let previews = load_previews(&cfg, &stores, &git, &queue, &claim).await?;
    let state_parts = server_secrets(&cfg)?;
    let listener =
        tokio::net::TcpListener::from_std(socket).context("cannot set up the listening socket")?;
    let addr = listener.local_addr().context("no local address")?;
    let (tx, rx) = tokio::sync::watch::channel(false);
    let agent = Agent::new(store.clone(), apps).with_previews(previews);
    #[cfg(any(feature = "etcd", feature = "kubernetes"))]
    let (agent, coordination) = match replicas {
        Some(c) => {
            tracing::info!(replica = %c.name, lease_ttl_seconds = c.ttl.as_secs(), "Sharing the apps with the other replicas through {}", c.through);
            let task = tokio::spawn(c.task.instrument(tracing::info_span!("replicas")));
            (agent.with_gates(c.gates, c.coordinated), Some(task))
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
    signals.wait().await;
    tracing::info!("Stopping");
    let _ = tx.send(true);
    let stopping = async {
        join.await.context("agent task failed")?;
        #[cfg(any(feature = "etcd", feature = "kubernetes"))]
        let _ = release_tx.send(true);
        #[cfg(any(feature = "etcd", feature = "kubernetes"))]
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
pub(super) const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(20);

/// The previews of every app with a `preview` section, reporting through `queue` when the app
/// has a `status` section.
pub(super) async fn load_previews(
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
/// What every app of a process shares: the store (per app, with etcd replicas), the Git
/// cache, the metrics (the agent's only), the commit-status queue, and the lock that serializes
/// claims of new objects.
pub(super) struct Shared<'a> {
    pub(super) stores: &'a Stores,
    pub(super) git: &'a GitCache,
    pub(super) metrics: Option<&'a Arc<Metrics>>,
    pub(super) queue: &'a report::Queue,
    pub(super) claim: &'a Arc<tokio::sync::Mutex<()>>,
}

pub(super) async fn load_apps(
    cfg: &Loaded,
    shared: &Shared<'_>,
    only: Option<&str>,
    dry_run: bool,
) -> anyhow::Result<Vec<App>> {
    let &Shared {
        stores,
        git,
        metrics,
        queue,
        claim,
    } = shared;
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
pub(super) fn lock_agent(cfg: &Loaded) -> anyhow::Result<std::fs::File> {
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

/// SIGTERM and SIGINT, listened for from when [`Signals::listen`] is called: one that comes
/// before [`Signals::wait`] is kept for it, instead of ending the process unannounced (the
/// default action) while the agent is starting.
pub(super) struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    /// Starts listening.
    ///
    /// # Errors
    ///
    /// When a handler cannot be registered.
    pub(super) fn listen() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?,
        })
    }

    /// Until one of them comes (or came since [`Signals::listen`]).
    pub(super) async fn wait(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// Until SIGTERM or SIGINT comes, listened for from this call on.
///
/// # Errors
///
/// When a handler cannot be registered.
pub(super) async fn wait_for_signal() -> anyhow::Result<()> {
    Signals::listen()?.wait().await;
    Ok(())
}
