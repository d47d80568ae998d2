//! The app status record: what the agent found, in the JSON shape of ARCHITECTURE.md section 7.
//!
//! The agent keeps one `AppStatus` record per app in the store under the reserved API group
//! (`driftless.io/v1`, kind `AppStatus`, cluster-scoped, named after the app), so
//! `driftless status` works from any process. Conditions follow Kubernetes'
//! `metav1.Condition` (`type`, `status`, `reason`, `message`, `lastTransitionTime`), and
//! [`set_condition`] moves `lastTransitionTime` only when the status changes, as
//! `meta.SetStatusCondition` does.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::health::Health;
use crate::manifest::Diagnostic;
use crate::object::{Object, ObjectKey, RESERVED_GROUP};
use crate::store::{self, Precondition, Selector, Store, Write};

/// Kind of the status records.
pub const KIND: &str = "AppStatus";

/// Whether the store matches Git.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SyncStatus {
    /// Every declared object matches Git's newest usable revision and nothing awaits pruning.
    Synced,
    /// Some object differs from Git (drift not reverted, a conflict, a delete not done).
    OutOfSync,
    /// The newest revision cannot be compared: the source is unavailable or its manifests
    /// do not parse.
    Unknown,
}

impl std::fmt::Display for SyncStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// Declares a closed set of names serialized as today's strings, with `Other` for a name
/// written by another version of driftless (read back as it is, never produced here).
macro_rules! named {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(from = "String", into = "String")]
        pub enum $name {
            $($(#[$vdoc])* $variant,)+
            /// A name this version does not know (a record written by another version).
            Other(String),
        }

        impl $name {
            /// The name as written in the status record and shown to people.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => stringify!($variant),)+
                    Self::Other(s) => s,
                }
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                match s.as_str() {
                    $(stringify!($variant) => Self::$variant,)+
                    _ => Self::Other(s),
                }
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.as_str().to_string()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

named! {
    /// A condition's status, as Kubernetes' `metav1.ConditionStatus`.
    ConditionStatus {
        /// The condition holds.
        True,
        /// It does not.
        False,
        /// Not known.
        Unknown,
    }
}

impl ConditionType {
    /// Every condition type driftless sets, in the order the status lists them.
    pub const ALL: [ConditionType; 9] = [
        ConditionType::Ready,
        ConditionType::Reconciling,
        ConditionType::Stalled,
        ConditionType::Healthy,
        ConditionType::Progressing,
        ConditionType::SourceAvailable,
        ConditionType::Stale,
        ConditionType::SyncWindow,
        ConditionType::Contested,
    ];
}

impl From<bool> for ConditionStatus {
    fn from(b: bool) -> Self {
        if b { Self::True } else { Self::False }
    }
}

named! {
    /// The type of an app's condition (kstatus's `Ready`, `Reconciling`, `Stalled`, and
    /// driftless's own; README "Status").
    ConditionType {
        /// Synced and Healthy, with nothing failing: the summary (kstatus).
        Ready,
        /// A reconcile is under way or scheduled after a failure (kstatus).
        Reconciling,
        /// Cannot make progress without a change (kstatus).
        Stalled,
        /// Every object Healthy; the reason is the app's health.
        Healthy,
        /// Converging within `sync.progressDeadline`, or past it.
        Progressing,
        /// The last fetch worked.
        SourceAvailable,
        /// The gap is older than `sync.staleAfter`.
        Stale,
        /// Whether sync windows let automatic syncs run.
        SyncWindow,
        /// Another writer keeps changing a field back.
        Contested,
    }
}

named! {
    /// Why a condition has its status: one CamelCase word, as Kubernetes conventions ask.
    Reason {
        /// Listed from the config; nothing has run the app yet.
        NotSyncedYet,
        /// No revision applied yet.
        Initializing,
        /// A new revision is being applied.
        ApplyingRevision,
        /// The source cannot be fetched (`Ready`).
        SourceUnavailable,
        /// The newest revision has manifest errors.
        InvalidManifest,
        /// The app's path is not a folder at the newest revision.
        PathNotFound,
        /// The newest commit is not signed by a trusted key.
        SignatureRejected,
        /// The target refused an object of the newest revision in a dry run (Kubernetes:
        /// validation, an unknown kind, admission, RBAC `forbidden`); nothing of it applied.
        RejectedByTarget,
        /// An empty revision would prune everything (`allowEmpty` is off), or a prune is held.
        PruneBlocked,
        /// Writing the store failed.
        SyncFailed,
        /// An object is owned by another app.
        OwnershipConflict,
        /// A sync window holds a change back.
        HeldBySyncWindow,
        /// Not converged within `sync.progressDeadline`.
        ProgressDeadlineExceeded,
        /// Objects differ from Git.
        OutOfSync,
        /// Everything matches Git and is healthy.
        Synced,
        /// Synced and healthy (`Progressing`).
        Converged,
        /// Health `Progressing`, or converging within the deadline.
        Progressing,
        /// Health `Healthy`.
        Healthy,
        /// Health `Suspended`.
        Suspended,
        /// Health `Missing`.
        Missing,
        /// Health `Degraded`.
        Degraded,
        /// Health `Unknown`.
        Unknown,
        /// The gap is older than `staleAfter`.
        GapExceededThreshold,
        /// The gap is younger than `staleAfter`.
        WithinThreshold,
        /// Sync windows let automatic syncs run.
        Open,
        /// A deny window is open.
        DenyWindowActive,
        /// No allow window is open.
        OutsideAllowWindows,
        /// Another writer keeps changing a field back.
        AnotherWriter,
        /// No other writer is changing objects back.
        NoContention,
        /// The last attempt failed; a retry is scheduled.
        RetryScheduled,
        /// The last attempt worked.
        Succeeded,
        /// The ref does not exist in the repository.
        RefNotFound,
        /// The fetch took longer than `source.timeout`.
        Timeout,
        /// The Git host refused the credentials.
        AuthenticationFailed,
        /// The SSH host key is not the known one.
        HostKeyMismatch,
        /// The Git host cannot be reached, or the repository does not exist.
        Unreachable,
        /// Another fetch failure.
        FetchFailed,
        /// A renderer (`kustomize build`, `helm template`) is missing, failed, ran past
        /// `source.renderTimeout` or printed too much.
        RenderFailed,
        /// The chart of `source.helm.chart` cannot be fetched or resolved.
        ChartUnavailable,
        /// A chart repository gives another digest for a chart version pinned earlier.
        ChartDigestChanged,
    }
}

/// A condition, as Kubernetes' `metav1.Condition`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Ready`, `Reconciling`, `SourceAvailable`, ...
    #[serde(rename = "type")]
    pub type_: ConditionType,
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// A CamelCase reason, e.g. `Synced`, `InvalidManifest`.
    pub reason: Reason,
    /// A sentence for people.
    pub message: String,
    /// RFC 3339 time of the last change of `status`.
    pub last_transition_time: String,
}

/// One object of an app.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceStatus {
    /// API group, empty for core.
    pub group: String,
    /// Version from the declared `apiVersion`.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Namespace, empty for cluster-scoped.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Whether it matches Git.
    pub sync: SyncStatus,
    /// Its health.
    pub health: Health,
    /// Why it has that health, when the rule says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_message: Option<String>,
    /// Why it is out of sync, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl ResourceStatus {
    /// The object's key.
    pub fn key(&self) -> ObjectKey {
        ObjectKey::new(&self.group, &self.kind, &self.namespace, &self.name)
    }
}

/// Resources from which a status record's text is made on all cores
/// ([`AppStatus::to_record_text`]): 10,000 took 9 ms on the thread that writes the status, at
/// the end of a cold sync.
const RESOURCES_ON_ALL_CORES: usize = 1024;

/// The status of one app, as `driftless status -o json` and `GET /api/v1/apps` give it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppStatus {
    /// The app's name.
    pub name: String,
    /// The commit id in force: the last revision applied (or being enforced).
    pub revision: Option<String>,
    /// The newest commit tried, which may have failed.
    pub last_attempted_revision: Option<String>,
    /// Whether the store matches Git.
    pub sync: SyncStatus,
    /// The worst health of the app's objects.
    pub health: Health,
    /// RFC 3339 time the app last became out of sync; `null` when synced.
    pub out_of_sync_since: Option<String>,
    /// RFC 3339 time the app started converging (a new revision, drift, an object not ready)
    /// without having converged since; `null` when synced and healthy. Past
    /// `sync.progressDeadline`, `Progressing` turns False.
    #[serde(default)]
    pub progressing_since: Option<String>,
    /// Conditions, kstatus-compatible.
    pub conditions: Vec<Condition>,
    /// Every declared object (and every object awaiting pruning). Each entry is shared
    /// (`Arc`): a status is copied at each change (for the agent's API and the status writer),
    /// and with 10,000 objects a deep copy per drift revert cost milliseconds; serialized as
    /// the entry itself.
    pub resources: Vec<std::sync::Arc<ResourceStatus>>,
    /// Warnings and errors of the newest revision tried.
    pub diagnostics: Vec<Diagnostic>,
}

impl AppStatus {
    /// The status of an app nothing is known about yet.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            revision: None,
            last_attempted_revision: None,
            sync: SyncStatus::Unknown,
            health: Health::Unknown,
            out_of_sync_since: None,
            progressing_since: None,
            conditions: Vec::new(),
            resources: Vec::new(),
            diagnostics: Vec::new(),
        }
    }

    /// The condition of type `type_`, if set.
    pub fn condition(&self, type_: ConditionType) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// The key of this app's record in the store.
    pub fn record_key(app: &str) -> ObjectKey {
        ObjectKey::new(RESERVED_GROUP, KIND, "", app)
    }

    /// The record to store, as text (a status of 10,000 objects is megabytes: no JSON tree
    /// of it): `status` holds this struct.
    ///
    /// # Errors
    ///
    /// A `serde_json` error when serializing fails (a struct of strings, vectors and enums
    /// does not).
    pub fn to_record_text(&self) -> Result<store::RecordText, serde_json::Error> {
        if self.resources.len() < RESOURCES_ON_ALL_CORES {
            return store::RecordText::new(KIND, &self.name, "status", self);
        }
        store::RecordText::with_json(KIND, &self.name, "status", |out| {
            self.write_json_on_all_cores(out)
        })
    }

    /// This status's JSON (the same text as serde's), its resources made on all cores
    /// ([`crate::par::write_joined`]): the rest is serialized with no resources and no
    /// diagnostics, the last two fields, which then go in place of the empty ones.
    fn write_json_on_all_cores(&self, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        const EMPTY_TAIL: &[u8] = b",\"resources\":[],\"diagnostics\":[]}";
        // Every field named: one added is a compile error here.
        let rest = AppStatus {
            name: self.name.clone(),
            revision: self.revision.clone(),
            last_attempted_revision: self.last_attempted_revision.clone(),
            sync: self.sync,
            health: self.health,
            out_of_sync_since: self.out_of_sync_since.clone(),
            progressing_since: self.progressing_since.clone(),
            conditions: self.conditions.clone(),
            resources: Vec::new(),
            diagnostics: Vec::new(),
        };
        let start = out.len();
        serde_json::to_writer(&mut *out, &rest)?;
        if !out.ends_with(EMPTY_TAIL) {
            // Not the last two fields (the struct changed): serde's text, on this thread.
            out.truncate(start);
            return serde_json::to_writer(out, self);
        }
        out.truncate(out.len() - EMPTY_TAIL.len());
        out.extend_from_slice(b",\"resources\":[");
        crate::par::write_joined("status text", &self.resources, out, |r, text| {
            serde_json::to_writer(text, &**r)
        })?;
        out.extend_from_slice(b"],\"diagnostics\":");
        serde_json::to_writer(&mut *out, &self.diagnostics)?;
        out.push(b'}');
        Ok(())
    }

    /// Reads a record back.
    ///
    /// # Errors
    ///
    /// A `serde_json` error when `status` does not have this shape.
    pub fn from_record(obj: &Object) -> Result<Self, serde_json::Error> {
        serde_json::from_value(obj.get("status").cloned().unwrap_or(Value::Null))
    }
}

/// Sets a condition; `lastTransitionTime` becomes `now` only when the status or the reason
/// changes (or the condition is new): a new reason is a new state (Progressing for a new
/// revision, Degraded after Progressing), while a message that only updates counts is not.
/// Returns true when anything changed.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: ConditionType,
    status: bool,
    reason: Reason,
    message: impl Into<String>,
    now: &str,
) -> bool {
    let status = ConditionStatus::from(status);
    let message = message.into();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            let changed = c.status != status || c.reason != reason || c.message != message;
            if c.status != status || c.reason != reason {
                c.last_transition_time = now.to_string();
            }
            c.status = status;
            c.reason = reason;
            c.message = message;
            changed
        }
        None => {
            conditions.push(Condition {
                type_,
                status,
                reason,
                message,
                last_transition_time: now.to_string(),
            });
            true
        }
    }
}

/// Removes a condition; true when it was there.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: ConditionType) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// Reads every app status record in the store, sorted by app name. A record that cannot be
/// read or does not parse is left out and logged (a warning naming it and why), so one bad
/// record does not hide every app's status; `driftless store delete appstatus.driftless.io
/// NAME` removes it.
///
/// # Errors
///
/// A store error.
pub async fn read_all(store: &dyn Store) -> store::Result<Vec<AppStatus>> {
    Ok(read_all_naming_unreadable(store).await?.0)
}

/// [`read_all`], with the apps whose status record is there but cannot be read or does not
/// parse: app name → why (the store's or the parser's message, which quotes no values).
///
/// # Errors
///
/// As [`read_all`].
pub async fn read_all_naming_unreadable(
    store: &dyn Store,
) -> store::Result<(Vec<AppStatus>, BTreeMap<String, String>)> {
    let listing = store
        .list(&Selector {
            group: Some(RESERVED_GROUP.into()),
            kind: Some(KIND.into()),
            namespace: None,
        })
        .await?;
    let mut unreadable = BTreeMap::new();
    for (key, why) in &listing.unreadable {
        tracing::warn!(record = %key, error = %why, "App status record unreadable; left out");
        unreadable.insert(key.name().to_string(), why.clone());
    }
    let mut out = Vec::new();
    for (key, obj) in listing.objects {
        match AppStatus::from_record(&obj) {
            Ok(status) => out.push(status),
            Err(e) => {
                tracing::warn!(record = %key, error = %e, "App status record does not parse; left out");
                unreadable.insert(key.name().to_string(), e.to_string());
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((out, unreadable))
}

/// Reads one app's status record.
///
/// # Errors
///
/// As [`read_all`].
pub async fn read(store: &dyn Store, app: &str) -> store::Result<Option<AppStatus>> {
    Ok(read_versioned(store, app).await?.map(|(s, _)| s))
}

/// [`read`], with the record's resourceVersion.
///
/// # Errors
///
/// As [`read_all`].
pub async fn read_versioned(
    store: &dyn Store,
    app: &str,
) -> store::Result<Option<(AppStatus, u64)>> {
    /// The record's shape, read from its text without a JSON tree in between (a status of
    /// 10,000 objects is megabytes).
    #[derive(Deserialize)]
    struct Record {
        #[serde(default)]
        status: Option<AppStatus>,
    }
    let key = AppStatus::record_key(app);
    match store.get_json(&key).await? {
        None => Ok(None),
        Some((text, rv)) => match serde_json::from_str::<Record>(&text) {
            Ok(Record {
                status: Some(status),
            }) => Ok(Some((status, rv))),
            // Not that shape: the error of the object as a whole.
            Ok(Record { status: None }) | Err(_) => {
                let obj = store::decode(&key, &text)?;
                AppStatus::from_record(&obj)
                    .map(|st| Some((st, rv)))
                    .map_err(|e| store::Error::Corrupt {
                        key,
                        source: Box::new(e),
                    })
            }
        },
    }
}

/// Writes an app's status record, replacing what is there (the agent is its only writer); gives
/// the record's new resourceVersion.
///
/// # Errors
///
/// A store error.
pub async fn write(store: &dyn Store, status: &AppStatus) -> store::Result<u64> {
    let record = status.to_record_text().map_err(|e| store::Error::Corrupt {
        key: AppStatus::record_key(&status.name),
        source: Box::new(e),
    })?;
    let committed = store
        .commit(vec![Write::PutRecord {
            record,
            precondition: Precondition::Any,
        }])
        .await?;
    Ok(committed
        .stored
        .first()
        .and_then(store::Stored::resource_version)
        .unwrap_or(committed.revision))
}

/// `n` and the noun, singular for one: `1 object`, `12 objects`.
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_when_status_changes() {
        let mut c = Vec::new();
        assert!(set_condition(
            &mut c,
            ConditionType::Ready,
            true,
            Reason::Synced,
            "ok",
            "t1"
        ));
        assert!(!set_condition(
            &mut c,
            ConditionType::Ready,
            true,
            Reason::Synced,
            "ok",
            "t2"
        ));
        assert_eq!(c[0].last_transition_time, "t1");
        assert!(set_condition(
            &mut c,
            ConditionType::Ready,
            true,
            Reason::Synced,
            "ok again",
            "t3"
        ));
        assert_eq!(c[0].last_transition_time, "t1");
        assert!(set_condition(
            &mut c,
            ConditionType::Ready,
            false,
            Reason::InvalidManifest,
            "bad",
            "t4"
        ));
        assert_eq!(c[0].last_transition_time, "t4");
        assert_eq!(c[0].status, ConditionStatus::False);
    }

    #[test]
    fn records_round_trip_in_the_documented_json_shape() {
        let mut s = AppStatus::new("guestbook");
        s.sync = SyncStatus::Synced;
        s.health = Health::Healthy;
        set_condition(
            &mut s.conditions,
            ConditionType::Ready,
            true,
            Reason::Synced,
            "m",
            "2026-11-29T12:00:00Z",
        );
        let v = serde_json::to_value(&s).unwrap();
        for key in [
            "name",
            "revision",
            "lastAttemptedRevision",
            "sync",
            "health",
            "outOfSyncSince",
            "conditions",
            "resources",
            "diagnostics",
        ] {
            assert!(v.get(key).is_some(), "{key} in {v}");
        }
        assert_eq!(v["conditions"][0]["type"], "Ready");
        assert_eq!(
            v["conditions"][0]["lastTransitionTime"],
            "2026-11-29T12:00:00Z"
        );
        let rec = s.to_record_text().unwrap().to_object().unwrap();
        assert_eq!(rec.key(), AppStatus::record_key("guestbook"));
        assert_eq!(AppStatus::from_record(&rec).unwrap(), s);
    }

    /// A status record's text made on all cores (from 1,024 resources) is serde's, byte for
    /// byte: across the batch and part boundaries, with text to escape, with and without
    /// diagnostics; small statuses are serde's too.
    #[test]
    fn a_status_text_made_on_all_cores_is_the_one_serde_makes() {
        for n in [0, 3, 1023, 1024, 1025, 4097] {
            for with_diagnostics in [false, true] {
                let mut s = AppStatus::new("app\"é");
                s.revision = Some("r1".into());
                set_condition(
                    &mut s.conditions,
                    ConditionType::Ready,
                    false,
                    Reason::Progressing,
                    "waiting \"now\"",
                    "2026-12-06T00:00:00Z",
                );
                s.resources = (0..n)
                    .map(|i| {
                        std::sync::Arc::new(ResourceStatus {
                            group: if i % 2 == 0 { "" } else { "apps" }.into(),
                            version: "v1".into(),
                            kind: "ConfigMap".into(),
                            namespace: "ns".into(),
                            name: format!("c{i}\u{1}\""),
                            sync: SyncStatus::Synced,
                            health: Health::Healthy,
                            health_message: (i % 3 == 0).then(|| format!("m{i}")),
                            message: None,
                        })
                    })
                    .collect();
                if with_diagnostics {
                    s.diagnostics
                        .push(Diagnostic::error("a.yaml", 1, 2, "bad \"x\""));
                }
                let record = s.to_record_text().unwrap();
                let serde = store::RecordText::new(KIND, &s.name, "status", &s).unwrap();
                assert_eq!(
                    record.text(&record.head()),
                    serde.text(&serde.head()),
                    "{n} resources"
                );
            }
        }
    }

    #[test]
    fn names_read_back_as_written_and_unknown_ones_are_kept() {
        assert_eq!(
            Reason::from("HeldBySyncWindow".to_string()),
            Reason::HeldBySyncWindow
        );
        assert_eq!(Reason::HeldBySyncWindow.as_str(), "HeldBySyncWindow");
        let other = Reason::from("SomethingNewer".to_string());
        assert_eq!(other, Reason::Other("SomethingNewer".into()));
        assert_eq!(
            serde_json::to_value(&other).unwrap(),
            serde_json::json!("SomethingNewer")
        );
        assert_eq!(ConditionStatus::from(true).to_string(), "True");
    }
}
