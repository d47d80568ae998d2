//! `driftless sync`, `diff` (against the store, or offline between two files) and `health`.

use super::*;

pub(super) async fn sync(cfg: Loaded, app: Option<String>, dry_run: bool) -> anyhow::Result<u8> {
    let store = open_store(&cfg).await?;
    let git = git_cache(&cfg)?;
    let queue = report::Queue::default();
    let claim = Arc::new(tokio::sync::Mutex::new(()));
    let stores = Stores::shared(&store);
    let shared = Shared {
        stores: &stores,
        git: &git,
        metrics: None,
        queue: &queue,
        claim: &claim,
    };
    let apps = load_apps(&cfg, &shared, app.as_deref(), dry_run).await?;
    let mut all_synced = true;
    let last = apps.len().saturating_sub(1);
    for (i, mut app) in apps.into_iter().enumerate() {
        let span = tracing::info_span!("app", app = %app.name());
        // A sync asked for by a person: sync windows with `manualSync: true` let it through.
        let (_, report) = app.reconcile(Trigger::Manual).instrument(span).await;
        let st = app.status();
        if dry_run {
            out!("{}", report.dry_run_diff);
        }
        let s = report.summary;
        // What was done, or with nothing written, what would be.
        let (created, updated, deleted) = if dry_run || report.detect_only {
            ("to create", "to update", "to delete")
        } else {
            ("created", "updated", "deleted")
        };
        outln!(
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
            outln!("  {}: {}", ready.reason, ready.message);
        }
        let synced = if dry_run {
            st.sync == SyncStatus::Synced && s.create + s.update + s.delete == 0
        } else {
            st.sync == SyncStatus::Synced
        };
        all_synced &= synced;
        // Freeing an app of 10,000 objects takes a tenth of a second of CPU: done beside the
        // next app; the last one's objects are left to the exit.
        if i == last {
            app.leave_to_exit();
            continue;
        }
        let span = tracing::debug_span!("drop_app");
        let _ = std::thread::Builder::new()
            .name("drop-app".into())
            .spawn(move || {
                let _span = span.entered();
                drop(app)
            });
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
pub(super) async fn resolve_revision(
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

pub(super) async fn diff_cmd(
    cfg: Loaded,
    app: Option<String>,
    revision: Option<String>,
) -> anyhow::Result<u8> {
    // A diff writes nothing; on a cluster it does not create the records' namespace either.
    let store = if cfg.config.store.kubernetes.is_some() {
        open_existing_store(&cfg).await?
    } else {
        open_store(&cfg).await?
    };
    let git = git_cache(&cfg)?;
    let mut changes = false;
    for app in selected_apps(&cfg, app.as_deref())? {
        let name = app.name.value.clone();
        let fetched = resolve_revision(&git, &app, revision.as_deref()).await?;
        let set = crate::render::Render::for_app(&app)
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
        let ignore = app.sync.ignore_rules();
        let outcome = crate::sync::sync(
            store.as_ref(),
            &crate::sync::Request {
                entries_ahead: None,
                app: &name,
                revision: &fetched.revision,
                source: "diff",
                desired: &desired,
                scope: None,
                options: diff::PlanOptions {
                    prune: app.sync.prune,
                    allow_empty: app.sync.allow_empty,
                    adopt: app.sync.adopt,
                    prune_non_empty: app.sync.prune_non_empty,
                },
                ignore: &ignore,
                dry_run: true,
                inventory: None,
                verified: None,
                hold: None,
            },
        )
        .await
        .with_context(|| format!("app {name}"))?;
        outln!("# app {name} at {}", fetched.revision);
        out!("{}", diff::render_plan(&outcome.plan));
        for (key, why) in &outcome.conflicts {
            outln!("! {key}: {why}; not applied");
        }
        let s = outcome.plan.summary();
        // A write held back (a delete `prune: false` keeps) is still a difference: the app
        // reads OutOfSync for it, as Argo CD does (`RequiresPruning`).
        changes |= s.create + s.update + s.delete + s.skipped > 0;
        // A declared object left unapplied (another app's, another tool's) differs too.
        changes |= !outcome.conflicts.is_empty();
    }
    Ok(if changes { 1 } else { 0 })
}

/// Reads a file or standard input (`-`), naming it for diagnostics.
pub(super) fn read_input(file: &Path) -> anyhow::Result<(String, Vec<u8>)> {
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
pub(super) fn objects_of(file: &Path, mode: manifest::Mode) -> Option<Vec<Object>> {
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
pub(super) fn kubectl_last_applied(live: &Object) -> Option<Object> {
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
pub(super) fn diff_offline(desired: &Path, live: &Path) -> u8 {
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
            outln!("no drift: {key}");
            continue;
        }
        drift = true;
        if have.is_none() {
            outln!("missing from the live objects: {key}");
            continue;
        }
        for c in &step.changes {
            let show =
                |v: &Option<Value>| v.as_ref().map_or("(absent)".to_string(), |v| v.to_string());
            outln!("{}: {} -> {}", c.path, show(&c.live), show(&c.desired));
        }
        out!("{}", diff::render_step(&step));
    }
    let declared: BTreeSet<ObjectKey> = wants.iter().map(Object::key).collect();
    for key in live.keys().filter(|k| !declared.contains(*k)) {
        outln!("not declared (offline there is no inventory, so nothing is pruned): {key}");
    }
    u8::from(drift)
}

/// `driftless health -f FILE`.
pub(super) fn health_cmd(cfg: Loaded, file: &Path, output: StatusFormat) -> anyhow::Result<u8> {
    let rules = health_rules(&cfg)?;
    let (shown, bytes) = read_input(file)?;
    let parsed = manifest::parse_file_with(&shown, &bytes, manifest::Mode::Live);
    for d in &parsed.diagnostics {
        eprintln!("{d}");
    }
    if parsed.diagnostics.iter().any(Diagnostic::is_error) {
        return Ok(2);
    }
    let kinds = health::StatusKinds::from_objects(parsed.objects.iter().map(|d| &d.object));
    let assessed: Vec<(Object, health::Assessment, health::Rule)> = parsed
        .objects
        .into_iter()
        .map(|d| {
            let (a, rule) = health::explain(Some(&d.object), &rules, &kinds);
            (d.object, a, rule)
        })
        .collect();
    match output {
        StatusFormat::Json => {
            let objects: Vec<Value> = assessed
                .iter()
                .map(|(o, a, rule)| {
                    serde_json::json!({
                        "group": o.group(), "version": o.version(), "kind": o.kind(),
                        "namespace": o.namespace(), "name": o.name(),
                        "health": a.health, "message": a.message, "rule": rule.to_string(),
                    })
                })
                .collect();
            outln!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({ "objects": objects }))?
            );
        }
        StatusFormat::Table | StatusFormat::Wide => {
            for (o, a, _) in &assessed {
                if a.message.is_empty() {
                    outln!("{}: {}", o.key(), a.health);
                } else {
                    // One line per object: a message's line breaks are shown as `\n`.
                    outln!(
                        "{}: {}: {}",
                        o.key(),
                        a.health,
                        a.message.replace('\r', "\\r").replace('\n', "\\n")
                    );
                }
            }
        }
    }
    Ok(0)
}
