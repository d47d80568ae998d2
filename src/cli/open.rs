//! Opening what the commands work on: the store (SQLite, etcd with its TLS files and
//! replicas), the Git cache, signature trust, health rules, commit-status providers and the
//! server's secrets, from the loaded config.

use super::*;

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
    if cfg.config.store.kubernetes.is_some() {
        return open_kubernetes_store(cfg, true, None).await;
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
    let store: Arc<dyn Store> = Arc::new(store);
    OPENED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(store.clone());
    Ok(store)
}

/// The SQLite stores this process opened, kept until [`settle_opened`].
static OPENED: std::sync::Mutex<Vec<Arc<dyn Store>>> = std::sync::Mutex::new(Vec::new());

/// How long a command waits at its end for the stores' background work.
const SETTLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Waits, before the process exits, for what the stores it opened still do in the background
/// ([`Store::settle`]: SQLite's checkpoint of what this process wrote), at most 60 s each: so
/// that every command (`sync`, `store put`, the agent when it stops) leaves the write-ahead log
/// copied back into the file, as SQLite's automatic checkpoint did inside the commit.
pub(super) async fn settle_opened() {
    let opened = std::mem::take(&mut *OPENED.lock().unwrap_or_else(|e| e.into_inner()));
    for store in opened {
        if !store.settle(SETTLE_TIMEOUT).await {
            eprintln!(
                "warning: the store's write-ahead log was not checkpointed within {} s",
                SETTLE_TIMEOUT.as_secs()
            );
        }
    }
}

/// The field manager of `driftless store put` on Kubernetes: what it writes is someone else's
/// change to the agent, drift named as this manager's.
pub const CLI_FIELD_MANAGER: &str = "driftless-cli";

/// The store for `driftless store put`: [`open_store`], but on Kubernetes writing as
/// [`CLI_FIELD_MANAGER`] rather than the agent's field manager.
pub(super) async fn open_store_for_hand_edits(cfg: &Loaded) -> anyhow::Result<Arc<dyn Store>> {
    if cfg.config.store.etcd.is_none() && cfg.config.store.kubernetes.is_some() {
        return open_kubernetes_store(cfg, true, Some(CLI_FIELD_MANAGER)).await;
    }
    open_store(cfg).await
}

#[cfg(not(feature = "kubernetes"))]
async fn open_kubernetes_store(
    _cfg: &Loaded,
    _create: bool,
    _field_manager: Option<&str>,
) -> anyhow::Result<Arc<dyn Store>> {
    bail!(
        "store.kubernetes: this driftless was built without Kubernetes support; build it with `cargo build --release --features kubernetes`"
    )
}

/// Connects to the API server of `store.kubernetes` (see [`config::KubernetesConfig`] for
/// where the kubeconfig comes from); with `create`, makes sure the records' namespace exists
/// (reading commands do not create it). `field_manager` replaces the configured one.
#[cfg(feature = "kubernetes")]
async fn open_kubernetes_store(
    cfg: &Loaded,
    create: bool,
    field_manager: Option<&str>,
) -> anyhow::Result<Arc<dyn Store>> {
    Ok(Arc::new(open_kube(cfg, create, field_manager).await?))
}

/// [`open_kubernetes_store`], as the Kubernetes store itself.
#[cfg(feature = "kubernetes")]
pub(super) async fn open_kube(
    cfg: &Loaded,
    create: bool,
    field_manager: Option<&str>,
) -> anyhow::Result<crate::store::kubernetes::KubeStore> {
    use crate::store::kubernetes::{KubeStore, Options};
    let k = &cfg
        .config
        .store
        .kubernetes
        .as_ref()
        .context("no Kubernetes store configured")?
        .value;
    let options = kube::config::KubeConfigOptions {
        context: k.context.clone(),
        ..Default::default()
    };
    let credentials = || {
        format!(
            "{}: store.kubernetes: cannot load the cluster's credentials",
            cfg.path.display()
        )
    };
    let config = match (&k.kubeconfig, &k.context) {
        (Some(path), _) => {
            let field = format!("{}: store.kubernetes.kubeconfig", cfg.path.display());
            std::fs::metadata(path)
                .map_err(|e| anyhow::anyhow!("{field}: cannot read {}: {e}", path.display()))?;
            // read_from resolves the file's relative certificate paths against its folder.
            let file = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                anyhow::anyhow!("{field}: {} is not a kubeconfig: {e}", path.display())
            })?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .with_context(credentials)?
        }
        (None, Some(_)) => kube::Config::from_kubeconfig(&options)
            .await
            .with_context(credentials)?,
        // $KUBECONFIG, ~/.kube/config, then the in-cluster service account, as kubectl.
        (None, None) => kube::Config::infer().await.with_context(credentials)?,
    };
    let mut config = config;
    // kube-rs waits for an answer forever by default; an API server that accepted a request
    // and went silent would stall a sync or a Lease renewal. Watches end sooner than this on
    // their own (the store asks for `timeoutSeconds` below it).
    config.read_timeout = Some(crate::store::kubernetes::REQUEST_SILENCE_LIMIT);
    config.reset_reader_on_write = true;
    let client = kube::Client::try_from(config).with_context(|| {
        format!(
            "{}: store.kubernetes: cannot build a client",
            cfg.path.display()
        )
    })?;
    let store = KubeStore::open(
        client,
        Options {
            field_manager: field_manager
                .map_or_else(|| k.field_manager.value.clone(), String::from),
            namespace: k.namespace.value.clone(),
            force: k.force,
            create_namespace: create,
        },
    )
    .await
    .context("cannot open the Kubernetes store")?;
    Ok(store)
}

#[cfg(not(feature = "etcd"))]
pub(super) async fn open_etcd_store(_cfg: &Loaded) -> anyhow::Result<Arc<dyn Store>> {
    bail!(
        "store.etcd: this driftless was built without etcd support; build it with `cargo build --release --features etcd`"
    )
}

#[cfg(feature = "etcd")]
pub(super) async fn open_etcd_store(cfg: &Loaded) -> anyhow::Result<Arc<dyn Store>> {
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
pub(super) fn pem_certificates(path: &std::path::Path, field: &str) -> anyhow::Result<Vec<u8>> {
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
pub(super) fn pem_private_key(key: &SecretString, field: &str) -> anyhow::Result<()> {
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
pub(super) struct Stores {
    shared: Arc<dyn Store>,
    per_app: std::collections::HashMap<String, Arc<dyn Store>>,
}

impl Stores {
    pub(super) fn shared(store: &Arc<dyn Store>) -> Self {
        Self {
            shared: store.clone(),
            per_app: Default::default(),
        }
    }

    pub(super) fn for_app(&self, app: &str) -> Arc<dyn Store> {
        self.per_app
            .get(app)
            .cloned()
            .unwrap_or_else(|| self.shared.clone())
    }
}

/// This replica's name: `replica` of the store's section, else `DRIFTLESS_REPLICA`, else
/// `<hostname>-<pid>`.
///
/// # Errors
///
/// When `DRIFTLESS_REPLICA` is not a valid replica name.
#[cfg(any(feature = "etcd", feature = "kubernetes"))]
pub(super) fn replica_name(
    configured: Option<&serde_saphyr::Spanned<String>>,
) -> anyhow::Result<String> {
    if let Some(r) = configured {
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

/// How this agent's replicas share the apps (etcd leases, or Kubernetes Leases): this
/// replica's name, the lease TTL, whether it knows who holds what yet, the gate of each app,
/// and the coordination task, which gives the apps back once `release` turns true.
#[cfg(any(feature = "etcd", feature = "kubernetes"))]
pub(super) struct Coordination {
    /// This replica's name.
    pub name: String,
    /// The lease time to live (whole seconds).
    pub ttl: std::time::Duration,
    /// What the replicas share the apps through, for the log: `etcd leases`, `Kubernetes
    /// Leases`.
    pub through: &'static str,
    /// True once this replica knows who holds what.
    pub coordinated: tokio::sync::watch::Receiver<bool>,
    /// App name → its gate (`Some(fence)` while this replica holds the app).
    pub gates: std::collections::HashMap<String, crate::reconcile::Gate>,
    /// The coordination itself, to spawn; it gives the apps back once `release` turns true.
    pub task: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
}

/// With etcd or Kubernetes: the replica coordination of the configured apps and the fenced
/// store of each app. With SQLite: nothing to coordinate (one agent per store).
#[cfg(any(feature = "etcd", feature = "kubernetes"))]
pub(super) async fn replicas(
    cfg: &Loaded,
    store: &Arc<dyn Store>,
    #[cfg_attr(not(feature = "etcd"), allow(unused_variables))] cache: Option<
        &crate::store::cached::VersionCache,
    >,
    release: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<(Stores, Option<Coordination>)> {
    let names: Vec<String> = cfg
        .config
        .apps
        .iter()
        .map(|a| a.name.value.clone())
        .collect();
    let mut stores = Stores::shared(store);
    #[cfg(feature = "etcd")]
    if let Some(e) = &cfg.config.store.etcd {
        let etcd = open_etcd(cfg).await?;
        let r = crate::store::etcd::Replicas::new(
            &etcd,
            &replica_name(e.value.replica.as_ref())?,
            e.value.lease_ttl.value,
            names.clone(),
        );
        let gates = gate_each(
            &names,
            &mut stores,
            |n| r.gate(n),
            // Each app's fenced handle answers version asks from the one shared cache.
            |g| {
                let fenced: Arc<dyn Store> = Arc::new(etcd.fenced(g));
                Ok(match cache {
                    Some(c) => Arc::new(c.in_front_of(fenced)),
                    None => fenced,
                })
            },
        )?;
        return Ok((
            stores,
            Some(Coordination {
                name: r.name().to_string(),
                ttl: r.ttl(),
                through: "etcd leases",
                coordinated: r.coordinated(),
                gates,
                task: Box::pin(r.run(release)),
            }),
        ));
    }
    #[cfg(feature = "kubernetes")]
    if let Some(k) = &cfg.config.store.kubernetes {
        let kube = open_kube(cfg, true, None).await?;
        let r = crate::store::kubernetes::leases::Replicas::new(
            &kube,
            &replica_name(k.value.replica.as_ref())?,
            k.value.lease_ttl.value,
            names.clone(),
        );
        // Handles on the shared store: its change feed watches the kinds the apps write.
        let gates = gate_each(
            &names,
            &mut stores,
            |n| r.gate(n),
            |g| {
                store
                    .fenced(g)
                    .context("the Kubernetes store fences its writes")
            },
        )?;
        return Ok((
            stores,
            Some(Coordination {
                name: r.name().to_string(),
                ttl: r.ttl(),
                through: "Kubernetes Leases",
                coordinated: r.coordinated(),
                gates,
                task: Box::pin(r.run(release)),
            }),
        ));
    }
    let _ = release;
    Ok((stores, None))
}

/// The gate of each app (`gate`), and its store fenced by that gate (`fenced`) in `stores`.
#[cfg(any(feature = "etcd", feature = "kubernetes"))]
fn gate_each(
    names: &[String],
    stores: &mut Stores,
    gate: impl Fn(&str) -> Option<crate::reconcile::Gate>,
    fenced: impl Fn(crate::reconcile::Gate) -> anyhow::Result<Arc<dyn Store>>,
) -> anyhow::Result<std::collections::HashMap<String, crate::reconcile::Gate>> {
    let mut gates = std::collections::HashMap::new();
    for n in names {
        if let Some(g) = gate(n) {
            stores.per_app.insert(n.clone(), fenced(g.clone())?);
            gates.insert(n.clone(), g);
        }
    }
    Ok(gates)
}

/// Waits until the store answers (an etcd cluster may still be starting), logging each
/// failure; false when a stop signal came first.
pub(super) async fn wait_for_store(store: &Arc<dyn Store>) -> anyhow::Result<bool> {
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
pub(super) async fn open_existing_store(cfg: &Loaded) -> anyhow::Result<Arc<dyn Store>> {
    // etcd and Kubernetes: a server; nothing is created by opening it.
    if cfg.config.store.kubernetes.is_some() {
        return open_kubernetes_store(cfg, false, None).await;
    }
    let Some(path) = cfg.sqlite_path() else {
        return open_store(cfg).await;
    };
    if path.exists() {
        return open_store(cfg).await;
    }
    eprintln!(
        "note: no store at {} yet (the agent creates it on its first run)",
        path.display()
    );
    Ok(Arc::new(crate::store::memory::MemoryStore::new()))
}

/// The secrets of the server section: the sync endpoint's token and the webhook secrets.
pub(super) fn server_secrets(
    cfg: &Loaded,
) -> anyhow::Result<(Option<SecretString>, WebhookSecrets)> {
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
pub(super) fn read_optional(
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
pub(super) fn external_url(cfg: &Loaded) -> Option<String> {
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
pub(super) fn trust(
    cfg: &Loaded,
    index: usize,
    v: &config::VerifyConfig,
) -> anyhow::Result<source::Trust> {
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

/// The config's custom health rules, compiled: `health[]` (CEL expressions, Lua files) and
/// the `healthLuaDir` folder. A Lua file that cannot be read or does not compile is an error
/// naming the config key and the file's line.
pub(super) fn health_rules(cfg: &Loaded) -> anyhow::Result<health::CustomRules> {
    let mut rules = Vec::new();
    for (i, r) in cfg.config.health.iter().enumerate() {
        let at = || format!("{}: health[{i}]", cfg.path.display());
        if let Some(file) = &r.lua {
            let check = health::lua::LuaCheck::from_file(&file.value)
                .with_context(|| format!("{}.lua", at()))?;
            rules.push(health::CustomRule::lua(&r.group, &r.kind, check));
            continue;
        }
        let expr = |e: &Option<serde_saphyr::Spanned<String>>| e.as_ref().map(|s| s.value.clone());
        let (h, p, d) = (expr(&r.healthy), expr(&r.progressing), expr(&r.degraded));
        rules.push(
            health::CustomRule::new(&r.group, &r.kind, h.as_deref(), p.as_deref(), d.as_deref())
                .with_context(at)?,
        );
    }
    let mut all = health::CustomRules::new(rules);
    if let Some(dir) = &cfg.config.health_lua_dir {
        let checks = health::lua::LuaDir::load(&dir.value)
            .with_context(|| format!("{}: healthLuaDir", cfg.path.display()))?;
        all = all.with_lua_dir(checks);
    }
    Ok(all)
}

/// The repository cache, with each app's `source.auth` read (an error names the missing
/// secret's config key).
pub(super) fn git_cache(cfg: &Loaded) -> anyhow::Result<GitCache> {
    let git = GitCache::new(&cfg.config.cache_dir);
    for (i, app) in cfg.config.apps.iter().enumerate() {
        if let Some(c) = app
            .source
            .helm
            .as_ref()
            .and_then(|h| h.value.chart.as_ref())
            && let Some(a) = &c.auth
        {
            let read = |s: &Option<serde_saphyr::Spanned<config::SecretRef>>, key: &str| {
                read_optional(
                    cfg,
                    s.as_ref(),
                    &format!("apps[{i}].source.helm.chart.auth.{key}"),
                )
            };
            let secret = match read(&a.token, "token")? {
                Some(t) => Some(t),
                None => read(&a.password, "password")?,
            };
            git.charts().set_credentials(
                &c.repository.value,
                source::charts::Credentials {
                    username: a.username.clone(),
                    secret,
                },
            );
        }
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
pub(super) fn status_provider(
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
