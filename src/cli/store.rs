//! `driftless store list|get|put|delete`: the store read and written as a person would, with
//! kind names resolved as kubectl resolves them.

use super::*;

/// A `KIND[.GROUP]` argument.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct KindSpec {
    kind: String,
    group: Option<String>,
}

impl KindSpec {
    pub(super) fn parse(s: &str) -> Self {
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
    pub(super) fn matches_as(&self, key: &ObjectKey, short: bool) -> bool {
        let want = self.kind.to_ascii_lowercase();
        let want = if short {
            short_name(&want).unwrap_or(&want).to_string()
        } else {
            want
        };
        let have = key.kind().to_ascii_lowercase();
        let kind_ok = want == have
            || want.strip_suffix('s') == Some(have.as_str())
            || want.strip_suffix("es") == Some(have.as_str())
            || want
                .strip_suffix("ies")
                .is_some_and(|stem| have.strip_suffix('y') == Some(stem));
        kind_ok && self.group.as_ref().is_none_or(|g| *g == key.group())
    }
}

impl KindSpec {
    /// The keys among `keys` this spec names, as kubectl resolves a resource name: a kind
    /// spelled out (any case, or plural) wins over a short name that happens to match (`cm`
    /// naming a custom kind `Cm`); without a group, a kind of the core group wins over the same
    /// kind in another group.
    pub(super) fn resolve<'k>(
        &self,
        keys: impl Iterator<Item = &'k ObjectKey> + Clone,
    ) -> Vec<&'k ObjectKey> {
        let exact: Vec<&ObjectKey> = keys.clone().filter(|k| self.matches_as(k, false)).collect();
        let found = if exact.is_empty() {
            keys.filter(|k| self.matches_as(k, true)).collect()
        } else {
            exact
        };
        if self.group.is_none() && found.iter().any(|k| k.group().is_empty()) {
            found.into_iter().filter(|k| k.group().is_empty()).collect()
        } else {
            found
        }
    }
}

/// A hint for a kind named without its group that is one of driftless's own records
/// (`Inventory`, `AppStatus`, `Ownership`, `Preview`, `Verified`), which are listed only when their group
/// `driftless.io` is named.
pub(super) fn reserved_kind_hint(kind: &str) -> Option<String> {
    let spec = KindSpec::parse(kind);
    if spec.group.is_some() {
        return None;
    }
    [
        crate::sync::INVENTORY_KIND,
        crate::status::KIND,
        crate::sync::OWNERSHIP_KIND,
        crate::preview::KIND,
        crate::sync::VERIFIED_KIND,
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
pub(super) fn short_name(s: &str) -> Option<&'static str> {
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
pub(super) enum Found {
    Object(Object),
    Unreadable(ObjectKey, String),
}

impl Found {
    pub(super) fn key(&self) -> ObjectKey {
        match self {
            Found::Object(o) => o.key(),
            Found::Unreadable(k, _) => k.clone(),
        }
    }
}

pub(super) async fn find(
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
        .filter(|k| k.name() == name)
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
            .filter(|f| f.key().namespace() == ns)
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
            .map(|f| f.key().namespace().to_string())
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
pub(super) async fn find_one(
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
pub(super) fn kind_and_name<'a>(
    kind: &'a str,
    name: Option<&'a str>,
) -> anyhow::Result<(&'a str, &'a str)> {
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

pub(super) fn print_object(value: &Value, format: ObjectFormat) -> anyhow::Result<()> {
    match format {
        ObjectFormat::Json => outln!("{}", serde_json::to_string_pretty(value)?),
        ObjectFormat::Yaml => out!("{}", diff::to_yaml(value)),
    }
    Ok(())
}

pub(super) async fn store_cmd(cfg: Loaded, cmd: StoreCommand) -> anyhow::Result<u8> {
    let store = if matches!(cmd, StoreCommand::Put { .. }) {
        open_store_for_hand_edits(&cfg).await?
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
                    .is_none_or(|ns| k.namespace() == ns || k.namespace().is_empty())
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
            // Bad records are named, not allowed to hide the good ones; the listing is then
            // incomplete, and says so in its exit status (1), as `kubectl get` does when it
            // could not show everything asked for.
            let mut incomplete = false;
            for (key, why) in listing
                .unreadable
                .iter()
                .filter(|(k, _)| wanted.as_ref().is_none_or(|w| w.contains(k)))
            {
                incomplete = true;
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
            Ok(u8::from(incomplete))
        }
        StoreCommand::Get {
            kind,
            name,
            namespace,
            output,
        } => {
            // Several kinds at once (`cm,svc NAME`), as kubectl takes them: each found object
            // is printed; exit 1 when any is missing.
            let (found, missing) =
                find_each(store.as_ref(), &kind, name.as_deref(), namespace.as_deref()).await?;
            let mut objects = Vec::new();
            for f in found {
                match f {
                    Found::Object(one) => objects.push(Value::from(one)),
                    Found::Unreadable(key, why) => bail!(
                        "{}: the stored record is unreadable ({why}); `driftless store delete` removes it",
                        object::printable(&key.to_string())
                    ),
                }
            }
            match (objects.len(), output) {
                (0, _) => {}
                (1, _) => print_object(&objects[0], output)?,
                (_, ObjectFormat::Json) => print_object(
                    &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects}),
                    output,
                )?,
                (_, ObjectFormat::Yaml) => {
                    for (i, o) in objects.iter().enumerate() {
                        if i > 0 {
                            outln!("---");
                        }
                        print_object(o, output)?;
                    }
                }
            }
            Ok(u8::from(missing))
        }
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
                    json: None,
                });
            }
            let committed = store.commit(writes).await?;
            for o in &committed.stored {
                outln!(
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
        } => {
            let (found, missing) =
                find_each(store.as_ref(), &kind, name.as_deref(), namespace.as_deref()).await?;
            for found in found {
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
                outln!("{} deleted", object::printable(&found.key().to_string()));
            }
            Ok(u8::from(missing))
        }
    }
}

/// [`find_one`] for each kind of a comma-separated `KIND[,KIND...]` (or `KIND/NAME,...`): what
/// was found, and whether any was not (said on standard error).
///
/// # Errors
///
/// As [`find_one`].
pub(super) async fn find_each(
    store: &dyn Store,
    kinds: &str,
    name: Option<&str>,
    namespace: Option<&str>,
) -> anyhow::Result<(Vec<Found>, bool)> {
    let mut found = Vec::new();
    let mut missing = false;
    for kind in kinds.split(',').filter(|k| !k.is_empty()) {
        match find_one(store, kind, name, namespace).await? {
            Some(f) => found.push(f),
            None => missing = true,
        }
    }
    Ok((found, missing))
}

#[cfg(test)]
mod tests {
    use super::*;

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
