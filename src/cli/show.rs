//! `driftless status` and `wait`: what the agent recorded, read from the store.

use super::*;

/// `driftless wait`: polls the app's status record.
pub(super) async fn wait_cmd(
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
        if store.is_none() && cfg.sqlite_path().is_none_or(Path::exists) {
            store = Some(open_existing_store(&cfg).await?);
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
                        outln!("{last}");
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
                                | Reason::RejectedByTarget
                                | Reason::PruneBlocked
                        )
                    });
                    if let (Some(c), Some(attempted)) = (refused, attempted)
                        && attempted != st.revision.as_deref().unwrap_or_default()
                        && revision.is_none_or(|r| attempted.starts_with(r))
                    {
                        outln!(
                            "revision {attempted} will not be applied ({}: {}); a new commit is needed",
                            c.reason,
                            c.message
                        );
                        return Ok(1);
                    }
                }
                Ok(None) => last = format!("no status recorded for {app} yet"),
                Err(e) => last = format!("cannot read the store: {e}"),
            }
        }
        if tokio::time::Instant::now() >= deadline {
            outln!(
                "timed out after {}: {last}",
                humantime::format_duration(timeout)
            );
            return Ok(1);
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

pub(super) async fn status_cmd(cfg: Loaded, output: StatusFormat) -> anyhow::Result<u8> {
    let store = open_existing_store(&cfg).await?;
    let (mut apps, unreadable) = status::read_all_naming_unreadable(store.as_ref()).await?;
    // A configured app with no status record yet (no agent or sync has run it) is listed too;
    // one whose record is there but cannot be read is said to be so (its state is unknown),
    // not taken for an app nothing has run.
    for a in &cfg.config.apps {
        let name = &a.name.value;
        if !apps.iter().any(|s| s.name == *name) {
            let mut s = status::AppStatus::new(name);
            let now = crate::store::now_rfc3339();
            let (reason, message) = match unreadable.get(name) {
                Some(why) => (
                    Reason::Unknown,
                    format!(
                        "its stored status record cannot be read ({why}); `driftless store delete appstatus.driftless.io {name}` removes it, and the next sync writes it again"
                    ),
                ),
                None => (
                    Reason::NotSyncedYet,
                    "no agent or sync has run this app yet".to_string(),
                ),
            };
            crate::status::set_condition(
                &mut s.conditions,
                ConditionType::Ready,
                false,
                reason,
                message,
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
            outln!("{}", serde_json::to_string_pretty(&v)?);
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

/// With etcd or Kubernetes: which replica holds each app (app name to replica name). `None`
/// for SQLite, where one agent holds every app.
pub(super) async fn holders(cfg: &Loaded) -> anyhow::Result<Option<BTreeMap<String, String>>> {
    let read: Option<Result<BTreeMap<String, String>, crate::store::Error>> = {
        #[allow(unused_mut)]
        let mut read = None;
        #[cfg(feature = "etcd")]
        if cfg.config.store.etcd.is_some() {
            let etcd = open_etcd(cfg).await?;
            read = Some(
                crate::store::etcd::holders(&etcd)
                    .await
                    .map(|h| h.into_iter().map(|(k, v)| (k, v.replica)).collect()),
            );
        }
        #[cfg(feature = "kubernetes")]
        if cfg.config.store.kubernetes.is_some() {
            let kube = open_kube(cfg, false, None).await?;
            read = Some(crate::store::kubernetes::leases::holders(&kube).await);
        }
        read
    };
    match read {
        None => Ok(None),
        Some(Ok(h)) => Ok(Some(h)),
        Some(Err(e)) => {
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

/// `driftless version`: its own version, then one line per renderer.
pub(super) async fn version_cmd(cfg: &Loaded) -> anyhow::Result<u8> {
    outln!("driftless {}", env!("CARGO_PKG_VERSION"));
    for (name, found) in crate::render::tool_versions(&cfg.config.renderers).await {
        match found {
            Ok((path, version)) => outln!("{name} {version} ({})", path.display()),
            Err(why) => outln!("{name}: not found: {why}"),
        }
    }
    Ok(0)
}
