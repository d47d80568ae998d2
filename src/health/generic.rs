//! The generic rules: the health of an object of a kind no rule was written for, read from the
//! conventions its status follows.
//!
//! kstatus (sigs.k8s.io/cli-utils `pkg/kstatus`) reads only `observedGeneration` and the
//! `Ready`, `Reconciling` and `Stalled` conditions, and calls everything else Current. Controllers
//! say far more than that: a `status.phase` of `Failed`, a `Synced=False` condition with
//! `ReconcileError`, `readyReplicas` behind `replicas`. These rules read those too, in this
//! order; the first that speaks decides:
//!
//! 1. **Suspended**: `spec.suspend` or `spec.paused` is true, or `spec.enabled` is false; a rollout held on purpose
//!    (`spec.updateStrategy.paused` or `spec.updateStrategy.rollingUpdate.paused` true, or a
//!    `partition` above 0 there while fewer replicas are updated than desired, the StatefulSet
//!    convention); a `Paused` or `Suspended` condition is True; or a phase or state (below) is
//!    `Paused`, `Suspended`, `Hibernated` or `Stopped`.
//! 2. **Degraded**, when the object's own status says it failed:
//!    - a condition whose type names a failure is True: `Stalled`, `Failed`, `Failure`,
//!      `Degraded`, `Error`, `Invalid`, `NotReady`, a type starting with `Error`
//!      (`ErrorOccurred`) or ending in `Failed`, `Failure`, `Error`, `Errors` or `Unhealthy`;
//!    - any other condition is False with a terminal reason: one naming a failure (`fail`,
//!      `error`, `invalid`, `denied`, `forbidden`, `unauthorized`, `notfound`, `conflict`,
//!      `backoff`, `exceeded`, `rejected`, `unreachable`, `terminal`, `stalled`, `crash`, and the
//!      Gateway API's `notallowed`, `nomatching`, `unsupported`, `notpermitted`, in its reason,
//!      case-insensitive: `Ready=False` with `IssuerNotFound`, `Progressing=False` with
//!      `ProgressDeadlineExceeded`), or a message that starts with `Error` or `Failed`, or
//!      with `severity: Error` (Cluster API); a condition status may be a YAML boolean;
//!    - a phase, state or health field names a failure: `Failed`, `Error`, `Degraded`,
//!      `Unhealthy`, `Invalid`, `Rejected`, `Canceled`, `Aborted`, `NonCompliant`, `red`,
//!      `Warning`, `NotFound`, Ceph's `HEALTH_WARN` and `HEALTH_ERR`, `CrashLoopBackOff`, or any value
//!      containing `fail` or `error`. These fields are
//!      `status.health.status` and the top-level fields of `status` named `phase`, `state`,
//!      `health`, `status` or `compliant`, or ending in `Phase`, `State` or `Status`
//!      (`currentState`, the Zalando operator's `PostgresClusterStatus`; not `desiredState`);
//!    - an error field is set: `status.error` (text, or an object with a `message`) or a text
//!      field whose name starts with `err` or `failure` (`errorMessage`, Cluster API's
//!      `failureMessage`);
//!    - a finished run says it failed: `Complete`, `Completed` or `Succeeded` True with a
//!      terminal reason (`JobFailed`);
//!    - one or two levels down, a state-named field names a failure (per-cluster or
//!      per-component states: `applicationState.state`, `aggregatedStatus[].health`); lists
//!      named `history` are not read, and only failures are read this deep;
//!    - `status.healthy` is false, or an outcome flag is false (`status.pass`, `passed`,
//!      `success`, `succeeded`: Keptn's Analysis);
//!    - a condition naming a success is False (`Succeeded`, `ReconcileSuccess`,
//!      `InstallSucceeded`): Knative's convention for a `Succeeded` condition, `False` once
//!      failed.
//! 3. **Progressing** when the controller has not seen the latest spec: `status.observedGeneration`
//!    or a condition's `observedGeneration` behind `metadata.generation` (Kubernetes API
//!    conventions).
//! 4. **Unknown** when a phase or state is literally `Unknown`.
//! 5. **Progressing** when the object says it is on its way:
//!    - `Reconciling=True`, or a condition of the all-is-well kind (`Ready`, `Available`,
//!      `Healthy`, `Synced`, `Succeeded`, `Completed`, `Complete`, `Established`,
//!      `Reconciled`, `Installed`, `Active`, `Deployed`, `Configured`, `Valid`, `Accepted`,
//!      `Programmed`, `ResolvedRefs`, `Admitted`, a step done on the way: `Adopted`, `Applied`,
//!      `Attached`, `Bound`, `Connected`, `Initialized`, `Launched`, `Provisioned`,
//!      `Registered`, `Resolved`, `Scheduled`, `Validated`, `Verified`; or a type ending in
//!      `Ready`, `Healthy` or `Available`) that is False (without a terminal reason) or Unknown;
//!    - a policy or route attachment not accepted yet: an entry of `status.ancestors[]` or
//!      `status.parents[]` (Gateway API) without an `Accepted` condition;
//!    - a phase or state of the in-progress vocabulary (`Pending`, `Progressing`, `InProgress`,
//!      `Scheduled`, `Queued`, `New`, `yellow`, a healthy word negated: `NotReady`,
//!      `NotReconciled`; or whose first word ends in `ing` and is not `Running`:
//!      `Provisioning`, `ApplyingChanges`, `Waiting for pods`), at the top level or in a
//!      sub-status kept one level down (`applicationState.state`, `lastOperation.state`,
//!      `ansibleJobResult.status`);
//!    - `status.ready` is false;
//!    - DaemonSet-style counters behind (`numberReady` or `updatedNumberScheduled` below
//!      `desiredNumberScheduled`, or `numberUnavailable` above 0);
//!    - counters written as text behind (`statusReplicas: "0/2"`, kubectl's READY column),
//!      at the top level or one level down;
//!    - replica counters behind the desired count (`readyReplicas`, `availableReplicas`,
//!      `updatedReplicas` below `spec.replicas`, or `status.replicas` when the spec has none; a
//!      counter left out is zero, as Kubernetes leaves zero counters out).
//! 6. **Healthy** when a condition of the all-is-well kind is True (none being False, by 5), a
//!    phase or state is of the healthy vocabulary (`Running`, `Ready`, `Succeeded`,
//!    `Completed`, `Healthy`, `Active`, `Available`, `Bound`, `Deployed`, `Established`,
//!    `green`, ...), the counters have caught up, or `status.healthy`/`status.ready` is true.
//! 7. **No status at all**: `Progressing` ("waiting for the controller") when the kind is known
//!    to have a status subresource (a CustomResourceDefinition among the app's objects declares
//!    `subresources.status`, [`StatusKinds`]), since a controller that has not written one has
//!    not seen the object; `Healthy` otherwise (a ConfigMap, or a CRD kind without a status:
//!    nothing will ever report on it).
//! 8. Otherwise (a status with none of the above) **Healthy**, as kstatus says.
//!
//! Conditions are read from `status.conditions`, from the lists the Gateway API convention
//! nests them in (`status.parents[]`, `status.listeners[]`, `status.ancestors[]`) and
//! OpenShift's `status.ingress[]`, and from a sub-status one level down
//! (`status.podStatus.conditions`).
//!
//! A rule never says Healthy for an object whose own status names a failure: the failure
//! readings (2) come before every Healthy reading, and a phase of the failure vocabulary wins
//! over a True `Ready`.
//!
//! Pure: no I/O.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::{Assessment, Health, conditions_in, cstr};
use crate::health::Live;
use crate::object::Object;

/// The kinds known to have a status subresource, by API group and kind: read from
/// CustomResourceDefinitions (`apiextensions.k8s.io`), `spec.versions[].subresources.status` (v1)
/// or `spec.subresources.status` (v1beta1). An object of such a kind with no `status` at all has
/// not been seen by its controller yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatusKinds {
    with: BTreeSet<(String, String)>,
    without: BTreeSet<(String, String)>,
}

impl StatusKinds {
    /// No kinds known.
    pub fn none() -> Self {
        Self::default()
    }

    /// The kinds the CustomResourceDefinitions among `objects` declare with a status subresource
    /// (other objects are ignored).
    pub fn from_objects<'a>(objects: impl IntoIterator<Item = &'a Object>) -> Self {
        let mut kinds = Self::default();
        for o in objects {
            if o.group() != "apiextensions.k8s.io" || o.kind() != "CustomResourceDefinition" {
                continue;
            }
            let Some(spec) = o.get("spec") else { continue };
            let group = spec
                .get("group")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let Some(kind) = spec.pointer("/names/kind").and_then(Value::as_str) else {
                continue;
            };
            let top = spec.pointer("/subresources/status").is_some();
            let any_version = spec
                .get("versions")
                .and_then(Value::as_array)
                .is_some_and(|vs| {
                    vs.iter()
                        .any(|v| v.pointer("/subresources/status").is_some())
                });
            let entry = (group.to_string(), kind.to_string());
            if top || any_version {
                kinds.with.insert(entry);
            } else {
                kinds.without.insert(entry);
            }
        }
        kinds
    }

    /// Whether `group`/`kind` is known to have a status subresource.
    pub fn contains(&self, group: &str, kind: &str) -> bool {
        // Asked of every object without a status: no copies of its kind to find none.
        !self.with.is_empty() && self.with.contains(&(group.to_string(), kind.to_string()))
    }

    /// Whether a CRD of `group`/`kind` was seen (with a status subresource or without).
    pub fn knows(&self, group: &str, kind: &str) -> bool {
        let k = (group.to_string(), kind.to_string());
        self.with.contains(&k) || self.without.contains(&k)
    }

    /// Adds the kinds of `other`.
    pub fn extend(&mut self, other: &StatusKinds) {
        self.with.extend(other.with.iter().cloned());
        self.without.extend(other.without.iter().cloned());
    }
}

/// The API groups Kubernetes serves itself that hold a `.` (custom resources' groups must hold
/// one: apiextensions' CRD validation).
const BUILT_IN_GROUPS: &[&str] = &[
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
    "storagemigration.k8s.io",
];

/// Whether objects of `group` are custom resources (served through a CRD): a group with a `.`
/// that Kubernetes does not serve itself.
pub fn is_custom_group(group: &str) -> bool {
    group.contains('.') && !BUILT_IN_GROUPS.contains(&group)
}

/// Condition types that say all is well when True.
const POSITIVE: &[&str] = &[
    "Ready",
    "Available",
    "Healthy",
    "Synced",
    "Succeeded",
    "Completed",
    "Complete",
    "Established",
    "Reconciled",
    "Installed",
    "Active",
    "Deployed",
    "Configured",
    "Valid",
    // Gateway API (gateway.networking.k8s.io) and the policies built on it.
    "Accepted",
    "Programmed",
    "ResolvedRefs",
    // OpenShift's Route (`status.ingress[].conditions`).
    "Admitted",
    // Past participles of a step done on the object's way to working (Kubernetes' own
    // `PodScheduled`, `Initialized`; Karpenter's `Launched`, `Registered`; `Bound`, `Adopted`):
    // not there yet while `False`.
    "Adopted",
    "Applied",
    "Attached",
    "Bound",
    "Connected",
    "Initialized",
    "Launched",
    "Provisioned",
    "Registered",
    "Resolved",
    "Scheduled",
    "Validated",
    "Verified",
];

/// Whether a condition type says all is well when True: one of [`POSITIVE`], or a type ending in
/// `Ready`, `Healthy` or `Available` (`PodsHealthy`, `PredictorReady`).
fn positive(t: &str) -> bool {
    POSITIVE.contains(&t)
        || ["Ready", "Healthy", "Available"]
            .iter()
            .any(|s| t.len() > s.len() && t.ends_with(s) && !t.starts_with("Not"))
}

/// Whether a condition type names a failure (True is bad).
fn negative(t: &str) -> bool {
    matches!(
        t,
        "Stalled" | "Failed" | "Failure" | "Degraded" | "Error" | "Invalid" | "NotReady"
    ) || ["Failed", "Failure", "Error", "Errors", "Unhealthy"]
        .iter()
        .any(|s| t.len() > s.len() && t.ends_with(s))
        || t.starts_with("Error")
}

/// Whether a condition type names the success of a run or an operation (`Succeeded`,
/// `ReconcileSuccess`, `InstallSucceeded`, `SyncSuccessful`): `False` says it did not succeed,
/// which is a failure (Knative's duck-typed `Succeeded` condition, knative.dev/pkg
/// `apis/condition_types.go`: `Unknown` while running, `False` once failed).
fn success_named(t: &str) -> bool {
    ["Succeeded", "Success", "Successful"]
        .iter()
        .any(|s| t.ends_with(s))
}

/// The error fields a status may carry, when not empty: `status.error` (a string, or an object
/// with a `message`: the CSI snapshotter's convention), and every top-level string field whose
/// name starts with `err` or `failure` (`errorMessage`, `errMsg`, `errorDescription`; Cluster
/// API's `failureMessage` and `failureReason` for terminal failures).
fn error_fields(status: &Value) -> Vec<(&str, String)> {
    let mut out = Vec::new();
    match status.get("error") {
        Some(Value::String(s)) if !s.is_empty() => out.push(("error", s.clone())),
        Some(Value::Object(o)) => {
            if let Some(m) = o.get("message").and_then(Value::as_str) {
                out.push(("error.message", m.to_string()));
            }
        }
        _ => {}
    }
    for (f, v) in status.as_object().into_iter().flatten() {
        let l = f.to_ascii_lowercase();
        if (l.starts_with("err") || l.starts_with("failure"))
            && l != "error"
            && let Some(s) = v.as_str()
            && !s.is_empty()
        {
            out.push((f.as_str(), s.to_string()));
        }
    }
    out
}

/// A failure named one or two levels below the status' top level: a field named as a state
/// (`state`, `status`, `phase`, `health`, or ending in `State`, `Status` or `Phase`) whose value
/// is of the failure vocabulary, in an object or in a list of objects (per-cluster,
/// per-environment or per-component states: `applicationState.state`,
/// `aggregatedStatus[].health`, `statuses.<namespace>.state`). Lists named `history` are not
/// read: an old failure there is over. Only failures are read this deep: a nested `Running`
/// says nothing of the whole.
fn nested_failure(status: &Value) -> Option<(String, String)> {
    fn scan(v: &Value, path: &str, depth: usize) -> Option<(String, String)> {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    let p = format!("{path}.{k}");
                    if let Some(s) = v.as_str()
                        && state_named(k)
                        && word(s) == Some(Word::Failed)
                    {
                        return Some((p, s.to_string()));
                    }
                    if depth > 0
                        && k != "history"
                        && k != "conditions"
                        && let Some(found) = scan(v, &p, depth - 1)
                    {
                        return Some(found);
                    }
                }
                None
            }
            Value::Array(a) => a
                .iter()
                .enumerate()
                .find_map(|(i, v)| scan(v, &format!("{path}[{i}]"), depth)),
            _ => None,
        }
    }
    let top = status.as_object()?;
    for (k, v) in top {
        if k == "history" || k == "conditions" || !(v.is_object() || v.is_array()) {
            continue;
        }
        if let Some(found) = scan(v, &format!("status.{k}"), 1) {
            return Some(found);
        }
    }
    None
}

/// Whether a condition reason is terminal: it names a failure.
pub(super) fn terminal_reason(reason: &str) -> bool {
    let r = reason.to_ascii_lowercase();
    [
        "fail",
        "error",
        "invalid",
        "denied",
        "forbidden",
        "unauthorized",
        "notfound",
        "conflict",
        "backoff",
        "exceeded",
        "rejected",
        "unreachable",
        "terminal",
        "stalled",
        "crash",
        // Gateway API's reasons for a route or listener that will not work as written.
        "notallowed",
        "nomatching",
        "unsupported",
        "notpermitted",
    ]
    .iter()
    .any(|w| r.contains(w))
}

/// The reading of a phase, state or health word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Word {
    Failed,
    Suspended,
    Unknown,
    InProgress,
    Fine,
}

/// Reads a phase, state or health value by the common vocabularies (case, spaces, `_` and `-`
/// ignored). `None` for a value of no known vocabulary.
pub(super) fn word(value: &str) -> Option<Word> {
    let w: String = value
        .chars()
        .filter(|c| !matches!(c, ' ' | '_' | '-'))
        .collect::<String>()
        .to_ascii_lowercase();
    if w.is_empty() {
        return None;
    }
    if w.contains("fail")
        || w.contains("error")
        || matches!(
            w.as_str(),
            "degraded"
                | "unhealthy"
                | "invalid"
                | "rejected"
                | "red"
                | "crashloopbackoff"
                | "lost"
                | "canceled"
                | "cancelled"
                | "aborted"
                | "noncompliant"
                | "healtherr"
                | "healthwarn"
                | "warning"
                | "notfound"
        )
    {
        return Some(Word::Failed);
    }
    if matches!(
        w.as_str(),
        "paused" | "suspended" | "hibernated" | "hibernating" | "stopped"
    ) {
        return Some(Word::Suspended);
    }
    if w == "unknown" {
        return Some(Word::Unknown);
    }
    if matches!(
        w.as_str(),
        "running"
            | "ready"
            | "succeeded"
            | "success"
            | "successful"
            | "completed"
            | "complete"
            | "healthy"
            | "active"
            | "available"
            | "bound"
            | "deployed"
            | "established"
            | "exists"
            | "green"
            | "provisioned"
            | "created"
            | "initialized"
            | "installed"
            | "synced"
            | "online"
            | "ok"
            | "done"
            | "enabled"
            | "reconciled"
            | "up"
            | "current"
    ) {
        return Some(Word::Fine);
    }
    // The first word (split at spaces, `_` and lower-to-upper case changes): `ApplyingChanges`,
    // `PENDING_RERUN`, `Waiting for Pods to be ready`.
    let first: String = {
        let t = value.trim();
        let mut end = t.len();
        let mut prev_lower = false;
        for (i, c) in t.char_indices() {
            if c == ' ' || c == '_' || c == '-' || (prev_lower && c.is_ascii_uppercase()) {
                end = i;
                break;
            }
            prev_lower = c.is_ascii_lowercase();
        }
        t[..end].to_ascii_lowercase()
    };
    // A healthy word negated (`NotReady`, `NotReconciled`, `not synced`): not there yet.
    if w.contains("notready")
        || first == "pending"
        || w.strip_prefix("not")
            .is_some_and(|rest| word(rest) == Some(Word::Fine))
    {
        return Some(Word::InProgress);
    }
    let single_word = first.chars().all(|c| c.is_ascii_alphabetic());
    if matches!(
        w.as_str(),
        "pending"
            | "progressing"
            | "inprogress"
            | "new"
            | "queued"
            | "scheduled"
            | "yellow"
            | "notready"
            | "init"
            | "unready"
            | "waiting"
            | "upgradepending"
            | "importscheduled"
            | "importinprogress"
    ) || (single_word && first.ends_with("ing") && first != "running")
        || (value.trim().chars().all(|c| c.is_ascii_alphabetic())
            && w.ends_with("ing")
            && !w.ends_with("running"))
    {
        return Some(Word::InProgress);
    }
    None
}

/// The conditions of `status.conditions`, then those the Gateway API convention nests per parent,
/// listener or ancestor (`status.parents[].conditions`, `status.listeners[].conditions`,
/// `status.ancestors[].conditions`), then those of a sub-status one level down
/// (`status.podStatus.conditions`: a status that reports a pod's or a component's conditions
/// as its own).
fn conditions(obj: &Live) -> Vec<&Map<String, Value>> {
    let Some(status) = obj.get("status") else {
        return Vec::new();
    };
    let mut out = conditions_in(status.get("conditions"));
    for (k, v) in status.as_object().into_iter().flatten() {
        if k != "conditions" && v.is_object() {
            out.extend(conditions_in(v.get("conditions")));
        }
    }
    for nested in ["parents", "listeners", "ancestors", "ingress"] {
        for entry in status
            .get(nested)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            out.extend(conditions_in(entry.get("conditions")));
        }
    }
    out
}

/// A route's parent or a policy's ancestor (`status.parents[]` with `parentRef`,
/// `status.ancestors[]` with `ancestorRef`: Gateway API's `RouteParentStatus` and GEP-713's
/// `PolicyAncestorStatus`, which every implementation's policies use) that has no `Accepted`
/// condition: the controller has not accepted the attachment yet. The message names it.
fn unaccepted_attachment(status: &Value) -> Option<String> {
    for (list, reference) in [("parents", "parentRef"), ("ancestors", "ancestorRef")] {
        for entry in status
            .get(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(r) = entry.get(reference) else {
                continue;
            };
            let accepted = conditions_in(entry.get("conditions"))
                .iter()
                .any(|c| cstr(c, "type") == "Accepted");
            if !accepted {
                let name = r.get("name").and_then(Value::as_str).unwrap_or("?");
                return Some(format!(
                    "status.{list}: no Accepted condition for {name} yet"
                ));
            }
        }
    }
    None
}

/// A condition's status: `True`, `False` or `Unknown` (a YAML boolean, which some controllers
/// and hand-written objects give, read as its text).
fn cond_status(c: &Map<String, Value>) -> &str {
    match c.get("status") {
        Some(Value::String(s)) => s,
        Some(Value::Bool(true)) => "True",
        Some(Value::Bool(false)) => "False",
        _ => "",
    }
}

/// Whether a condition says it failed: its reason names a failure ([`terminal_reason`]), or its
/// message starts with `Error` or `Failed` (`Error: checksum mismatch`), or it has Cluster
/// API's `severity: Error`.
fn says_failed(c: &Map<String, Value>) -> bool {
    let message = cstr(c, "message").trim_start().to_ascii_lowercase();
    terminal_reason(cstr(c, "reason"))
        || cstr(c, "severity") == "Error"
        || ["error", "fail"].iter().any(|w| message.starts_with(w))
}

/// `type=status: reason: message`, for a message.
fn say(c: &Map<String, Value>) -> String {
    let mut s = format!("{}={}", cstr(c, "type"), cond_status(c));
    for k in ["reason", "message"] {
        let v = cstr(c, k);
        if !v.is_empty() {
            s.push_str(": ");
            s.push_str(v);
        }
    }
    s
}

/// The phase, state or health fields that are strings: (`field path`, value). These are
/// `status.health.status` and every top-level field of `status` named `phase`, `state`,
/// `health` or `status`, or ending in `Phase`, `State` or `Status` (`currentState`,
/// `stageStatus`, the Zalando operator's `PostgresClusterStatus`), but not `desiredState`.
fn words(status: &Value) -> Vec<(String, &str)> {
    let mut out = Vec::new();
    if let Some(s) = status
        .get("health")
        .and_then(|h| h.get("status"))
        .and_then(Value::as_str)
    {
        out.push(("status.health.status".to_string(), s));
    }
    for (k, v) in status.as_object().into_iter().flatten() {
        let Some(s) = v.as_str() else { continue };
        if state_named(k) {
            out.push((format!("status.{k}"), s));
        }
    }
    out
}

/// The state fields of a sub-status: an object (not a list) one level below `status` whose
/// name is itself a state's (`applicationState.state`, the Spark operator's) or ends in
/// `Result` or `Operation` (`ansibleJobResult.status`, Gardener's `lastOperation.state`): the
/// object's own state kept one level down. Read for in-progress words only (rule 5): per-member
/// lists and maps are not the whole's state.
fn sub_words(status: &Value) -> Vec<(String, &str)> {
    let mut out = Vec::new();
    for (k, v) in status.as_object().into_iter().flatten() {
        let l = k.to_ascii_lowercase();
        if !(state_named(k) || l.ends_with("result") || l.ends_with("operation")) {
            continue;
        }
        for (f, s) in v.as_object().into_iter().flatten() {
            if let Some(s) = s.as_str()
                && matches!(f.as_str(), "state" | "status" | "phase")
            {
                out.push((format!("status.{k}.{f}"), s));
            }
        }
    }
    out
}

/// Whether a status field is named as a state: `phase`, `state`, `health`, `status`,
/// `compliant`, or a name ending in `Phase`, `State` or `Status` that is not `desired…` or
/// `expected…` (case ignored).
fn state_named(k: &str) -> bool {
    let l = k.to_ascii_lowercase();
    matches!(
        l.as_str(),
        "phase" | "state" | "health" | "status" | "compliant"
    ) || (["phase", "state", "status"].iter().any(|e| l.ends_with(e))
        && !l.starts_with("desired")
        && !l.starts_with("expected"))
}

/// Boolean status fields that give the outcome of a run or a check (Keptn's Analysis
/// `status.pass`): `false` says it failed.
const OUTCOME_FLAGS: &[&str] = &["pass", "passed", "success", "succeeded"];

/// `status.healthy` and `status.ready` when booleans.
fn flags(status: &Value) -> (Option<bool>, Option<bool>) {
    (
        status.get("healthy").and_then(Value::as_bool),
        status.get("ready").and_then(Value::as_bool),
    )
}

fn int(v: Option<&Value>) -> Option<i64> {
    v.and_then(Value::as_i64)
}

/// The replica counters: `Some((ready, desired))` when the status has counters and one of them
/// is behind the desired count, `Some` with equal numbers when they caught up, `None` when the
/// status has no counters.
fn counters(obj: &Live, status: &Value) -> Option<(String, bool)> {
    // DaemonSet's convention (`numberReady` of `desiredNumberScheduled`), kept by DaemonSet-like
    // kinds of other groups.
    if let (Some(ready), Some(desired)) = (
        int(status.get("numberReady")),
        int(status.get("desiredNumberScheduled")),
    ) {
        let updated = int(status.get("updatedNumberScheduled")).unwrap_or(desired);
        let unavailable = int(status.get("numberUnavailable")).unwrap_or(0);
        if ready < desired || updated < desired || unavailable > 0 {
            return Some((
                format!(
                    "{ready} of {desired} scheduled pods ready ({updated} updated, {unavailable} unavailable)"
                ),
                false,
            ));
        }
        return Some((format!("{desired} scheduled pods ready"), true));
    }
    let names = ["readyReplicas", "availableReplicas", "updatedReplicas"];
    let present: Vec<(&str, i64)> = names
        .iter()
        .filter_map(|n| int(status.get(*n)).map(|v| (*n, v)))
        .collect();
    let desired = int(obj.get("spec").and_then(|s| s.get("replicas")))
        .or_else(|| int(status.get("replicas")))?;
    if present.is_empty() {
        // Kubernetes leaves a zero counter out: `replicas` with no `readyReplicas` is none ready.
        if status.get("replicas").is_some() && desired > 0 {
            return Some((format!("0 of {desired} replicas ready"), false));
        }
        return None;
    }
    for (n, v) in &present {
        if *v < desired {
            return Some((format!("{n}: {v} of {desired}"), false));
        }
    }
    Some((format!("{desired} replicas ready"), true))
}

/// Counters written as text `READY/DESIRED` (`"0/2"`, the READY column of kubectl and the
/// OpenTelemetry Operator's `status.scale.statusReplicas`), in a field of `status` or one level
/// down whose name ends in `replicas` or is `ready` (case ignored): `Some((message, caught_up))`
/// for the first one behind, or for the last one when all caught up; `None` without any.
fn text_counters(status: &Value) -> Option<(String, bool)> {
    fn parse(s: &str) -> Option<(u64, u64)> {
        let (a, b) = s.trim().split_once('/')?;
        Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
    }
    let named = |k: &str| {
        let l = k.to_ascii_lowercase();
        l.ends_with("replicas") || l == "ready"
    };
    let mut found = None;
    let top = status.as_object()?;
    let nested = top
        .iter()
        .filter_map(|(k, v)| v.as_object().map(|m| (format!("status.{k}."), m)));
    for (prefix, m) in std::iter::once(("status.".to_string(), top)).chain(nested) {
        for (k, v) in m {
            let Some((ready, desired)) = v.as_str().filter(|_| named(k)).and_then(parse) else {
                continue;
            };
            let said = format!("{prefix}{k} is {ready}/{desired}");
            if ready < desired {
                return Some((said, false));
            }
            found = Some((said, true));
        }
    }
    found
}

/// The generic rules (see the module documentation), for an object that is not being deleted.
pub(super) fn assess(obj: &Live, status_kinds: &StatusKinds) -> Assessment {
    let new = Assessment::new;
    // 1. Suspended.
    for flag in ["suspend", "paused"] {
        if obj
            .get("spec")
            .and_then(|s| s.get(flag))
            .and_then(Value::as_bool)
            == Some(true)
        {
            return new(Health::Suspended, format!("spec.{flag} is true"));
        }
    }
    if obj
        .get("spec")
        .and_then(|s| s.get("enabled"))
        .and_then(Value::as_bool)
        == Some(false)
    {
        return new(Health::Suspended, "spec.enabled is false".to_string());
    }
    // A rollout held on purpose: `spec.updateStrategy.paused` (or its `rollingUpdate.paused`),
    // or a partition (`partition`, Kubernetes' StatefulSet convention) while replicas are
    // still to be updated.
    let strategy = obj.get("spec").and_then(|s| s.get("updateStrategy"));
    for at in ["", "rollingUpdate"] {
        let part = if at.is_empty() {
            strategy
        } else {
            strategy.and_then(|s| s.get(at))
        };
        let Some(part) = part else { continue };
        let prefix = if at.is_empty() {
            "spec.updateStrategy".to_string()
        } else {
            format!("spec.updateStrategy.{at}")
        };
        if part.get("paused").and_then(Value::as_bool) == Some(true) {
            return new(Health::Suspended, format!("{prefix}.paused is true"));
        }
        if let Some(p) = int(part.get("partition"))
            && p > 0
        {
            let status = obj.get("status");
            let updated = int(status.and_then(|s| s.get("updatedReplicas"))).unwrap_or(0);
            let desired = int(obj.get("spec").and_then(|s| s.get("replicas")))
                .or_else(|| int(status.and_then(|s| s.get("replicas"))))
                .unwrap_or(0);
            if updated < desired {
                return new(
                    Health::Suspended,
                    format!("{prefix}.partition is {p}: {updated} of {desired} replicas updated"),
                );
            }
        }
    }
    let conds = conditions(obj);
    let empty = Value::Object(Map::new());
    let status = obj.get("status").filter(|s| s.is_object());
    let has_status = status.is_some_and(|s| s.as_object().is_some_and(|m| !m.is_empty()));
    let status = status.unwrap_or(&empty);
    if !has_status {
        // Nothing in status to go by (a ConfigMap, a Secret: most declared objects), and so no
        // conditions: 2 to 6 read only those, and find nothing.
        return no_status(obj, status_kinds);
    }
    let words = words(status);
    for c in &conds {
        if matches!(cstr(c, "type"), "Paused" | "Suspended") && cond_status(c) == "True" {
            return new(Health::Suspended, say(c));
        }
    }
    for (path, w) in &words {
        if word(w) == Some(Word::Suspended) {
            return new(Health::Suspended, format!("{path} is {w}"));
        }
    }
    // 2. Degraded.
    for c in &conds {
        let (t, s) = (cstr(c, "type"), cond_status(c));
        if negative(t) && s == "True" {
            return new(Health::Degraded, say(c));
        }
        // A condition that is not itself about a failure, False with a terminal reason (any
        // type: `ResourcesApplied=False` with `RemoteClusterClientFailed`), or False with
        // `severity: Error` (Cluster API's condition convention).
        if !negative(t) && s == "False" && (says_failed(c) || success_named(t)) {
            return new(Health::Degraded, say(c));
        }
    }
    let errors = error_fields(status);
    if !errors.is_empty() {
        let said: Vec<String> = errors
            .iter()
            .map(|(field, v)| format!("status.{field}: {v}"))
            .collect();
        return new(Health::Degraded, said.join("; "));
    }
    // A finished run that says it failed (`Complete=True` with `JobFailed`).
    for c in &conds {
        if matches!(cstr(c, "type"), "Complete" | "Completed" | "Succeeded")
            && cond_status(c) == "True"
            && terminal_reason(cstr(c, "reason"))
        {
            return new(Health::Degraded, say(c));
        }
    }
    if let Some((path, w)) = nested_failure(status) {
        return new(Health::Degraded, format!("{path} is {w}"));
    }
    for (path, w) in &words {
        if word(w) == Some(Word::Failed) {
            let message = status
                .get("message")
                .and_then(Value::as_str)
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            return new(Health::Degraded, format!("{path} is {w}{message}"));
        }
    }
    let (healthy_flag, ready_flag) = flags(status);
    if healthy_flag == Some(false) {
        return new(Health::Degraded, "status.healthy is false".to_string());
    }
    for f in OUTCOME_FLAGS {
        if status.get(*f).and_then(Value::as_bool) == Some(false) {
            return new(Health::Degraded, format!("status.{f} is false"));
        }
    }
    // 3. The latest spec not seen yet.
    if let Some(seen) = int(status.get("observedGeneration"))
        && seen < obj.generation() as i64
    {
        return new(
            Health::Progressing,
            format!(
                "waiting for generation {} to be observed (observed {seen})",
                obj.generation()
            ),
        );
    }
    // Conditions carry the generation they were written for (a Kubernetes API convention).
    for c in &conds {
        if let Some(seen) = int(c.get("observedGeneration"))
            && seen < obj.generation() as i64
        {
            return new(
                Health::Progressing,
                format!(
                    "waiting for generation {} to be observed ({} is of generation {seen})",
                    obj.generation(),
                    cstr(c, "type")
                ),
            );
        }
    }
    // 4. Unknown, said so.
    for (path, w) in &words {
        if word(w) == Some(Word::Unknown) {
            return new(Health::Unknown, format!("{path} is {w}"));
        }
    }
    // 5. On its way.
    for c in &conds {
        let (t, s) = (cstr(c, "type"), cond_status(c));
        if (t == "Reconciling" && s == "True") || (positive(t) && s != "True") {
            return new(Health::Progressing, say(c));
        }
    }
    if let Some(message) = unaccepted_attachment(status) {
        return new(Health::Progressing, message);
    }
    for (path, w) in words.iter().chain(&sub_words(status)) {
        if word(w) == Some(Word::InProgress) {
            return new(Health::Progressing, format!("{path} is {w}"));
        }
    }
    if ready_flag == Some(false) {
        return new(Health::Progressing, "status.ready is false".to_string());
    }
    let counted = counters(obj, status).or_else(|| text_counters(status));
    if let Some((message, false)) = &counted {
        return new(Health::Progressing, message.clone());
    }
    // 6. Healthy, said so.
    for c in &conds {
        if positive(cstr(c, "type")) {
            return new(Health::Healthy, say(c));
        }
    }
    for (path, w) in &words {
        if word(w) == Some(Word::Fine) {
            return new(Health::Healthy, format!("{path} is {w}"));
        }
    }
    if let Some((message, true)) = counted {
        return new(Health::Healthy, message);
    }
    if healthy_flag == Some(true) || ready_flag == Some(true) {
        return new(Health::Healthy, "status says ready".to_string());
    }
    // 8. Nothing to go by.
    new(Health::Healthy, String::new())
}

/// Steps 7 and 8 of [`assess`], for an object whose `status` is absent or empty.
fn no_status(obj: &Live, status_kinds: &StatusKinds) -> Assessment {
    // 7. No status yet.
    if status_kinds.contains(obj.group(), obj.kind()) {
        return Assessment::new(
            Health::Progressing,
            "waiting for the controller to report a status".to_string(),
        );
    }
    // 8. Nothing to go by.
    Assessment::new(Health::Healthy, String::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// Without a status to go by (none, an empty one, one that is not a mapping), only the
    /// spec's flags and the kind's status subresource decide: suspended, waiting for its
    /// controller, or healthy with nothing said (replicas in the spec count nothing).
    #[test]
    fn an_object_without_a_status_is_judged_by_its_spec_and_kind_alone() {
        let crd = Object::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "names": {"kind": "Widget"},
                     "versions": [{"name": "v1", "subresources": {"status": {}}}]},
        }))
        .unwrap();
        let kinds = StatusKinds::from_objects([&crd]);
        let judge = |kind: &str, rest: Value, kinds: &StatusKinds| {
            let mut v = json!({"apiVersion": "example.com/v1", "kind": kind,
                               "metadata": {"name": "w", "generation": 2}});
            for (k, x) in rest.as_object().unwrap() {
                v[k] = x.clone();
            }
            let a = assess(&Live::of(&Object::from_value(v).unwrap()), kinds);
            (a.health, a.message)
        };
        let waiting = (
            Health::Progressing,
            "waiting for the controller to report a status".to_string(),
        );
        let nothing = (Health::Healthy, String::new());
        for status in [
            json!({}),
            json!({"status": {}}),
            json!({"status": "Running"}),
        ] {
            assert_eq!(judge("Widget", status.clone(), &kinds), waiting, "{status}");
            assert_eq!(judge("Gadget", status.clone(), &kinds), nothing, "{status}");
            assert_eq!(
                judge("Widget", status.clone(), &StatusKinds::none()),
                nothing,
                "{status}"
            );
        }
        assert_eq!(
            judge("Gadget", json!({"spec": {"replicas": 3}}), &kinds),
            nothing
        );
        assert_eq!(
            judge("Widget", json!({"spec": {"suspend": true}}), &kinds),
            (Health::Suspended, "spec.suspend is true".to_string())
        );
    }

    fn assess_status(status: Value) -> Assessment {
        let obj = Object::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "generation": 1},
            "status": status,
        }))
        .unwrap();
        assess(&Live::of(&obj), &StatusKinds::none())
    }

    /// A status that reads as healthy on its own: any mix of all-is-well conditions True, a
    /// healthy phase, counters caught up.
    fn healthy_status() -> impl Strategy<Value = Map<String, Value>> {
        (
            proptest::sample::subsequence(POSITIVE.to_vec(), 0..4),
            proptest::option::of(proptest::sample::select(vec![
                "Running",
                "Ready",
                "Succeeded",
                "green",
                "Deployed",
                "Bound",
            ])),
            proptest::option::of(1i64..5),
        )
            .prop_map(|(types, phase, replicas)| {
                let mut m = Map::new();
                let conds: Vec<Value> = types
                    .iter()
                    .map(|t| json!({"type": t, "status": "True", "reason": "AsExpected"}))
                    .collect();
                m.insert("conditions".into(), Value::Array(conds));
                if let Some(p) = phase {
                    m.insert("phase".into(), json!(p));
                }
                if let Some(r) = replicas {
                    m.insert("replicas".into(), json!(r));
                    m.insert("readyReplicas".into(), json!(r));
                }
                m
            })
    }

    /// One way a status says it failed, as the module's rule 2 lists them.
    fn failure() -> impl Strategy<Value = (String, Value)> {
        prop_oneof![
            proptest::sample::select(vec![
                "Stalled",
                "Failed",
                "Degraded",
                "ErrorOccurred",
                "FetchFailed",
                "PodsUnhealthy"
            ])
            .prop_map(|t| (
                "condition".to_string(),
                json!({"type": t, "status": "True"})
            )),
            (
                proptest::sample::select(vec!["Ready", "Synced", "Available", "Whatever"]),
                proptest::sample::select(vec![
                    "ReconcileError",
                    "IssuerNotFound",
                    "ProgressDeadlineExceeded",
                    "AccessDenied",
                    "CrashLoopBackOff",
                    "NotAllowedByListeners",
                ]),
            )
                .prop_map(|(t, r)| (
                    "condition".to_string(),
                    json!({"type": t, "status": "False", "reason": r})
                )),
            proptest::sample::select(vec!["phase", "state", "health", "clusterStatus"])
                .prop_flat_map(|f| proptest::sample::select(vec![
                    "Failed",
                    "ERROR",
                    "Degraded",
                    "red",
                    "CreateFailed",
                    "Unhealthy",
                ])
                .prop_map(move |v| (f.to_string(), json!(v)))),
            proptest::sample::select(vec!["failureMessage", "errorMessage", "errMsg"])
                .prop_map(|f| (f.to_string(), json!("it broke"))),
            Just(("healthy".to_string(), json!(false))),
            Just(("pass".to_string(), json!(false))),
            Just((
                "condition".to_string(),
                json!({"type": "ReconcileSuccess", "status": "False", "reason": "Initializing"})
            )),
            Just(("cluster".to_string(), json!({"health": "HEALTH_WARN"}))),
            Just((
                "componentStatus".to_string(),
                json!({"db": {"state": "Failed"}})
            )),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// A rule never says Healthy for an object whose own status says it failed, whatever
        /// else the status says: every failure of rule 2 gives Degraded.
        #[test]
        fn a_failure_in_the_status_is_degraded_whatever_else_it_says(
            mut status in healthy_status(),
            (field, value) in failure(),
        ) {
            if field == "condition" {
                status
                    .get_mut("conditions")
                    .and_then(Value::as_array_mut)
                    .unwrap()
                    .push(value);
            } else {
                status.insert(field, value);
            }
            let a = assess_status(Value::Object(status.clone()));
            prop_assert_eq!(a.health, Health::Degraded, "{:?}: {}", status, a.message);
        }

        /// Without a failure, the same statuses are Healthy: the property above is not met by
        /// calling everything Degraded.
        #[test]
        fn the_same_statuses_without_the_failure_are_healthy(status in healthy_status()) {
            let a = assess_status(Value::Object(status.clone()));
            prop_assert_eq!(a.health, Health::Healthy, "{:?}: {}", status, a.message);
        }
    }

    #[test]
    fn vocabularies_read_phases_as_documented() {
        for (v, w) in [
            ("Failed", Word::Failed),
            ("UpdateFailed", Word::Failed),
            ("ERROR, the secret is missing", Word::Failed),
            ("red", Word::Failed),
            ("Hibernated", Word::Suspended),
            ("Unknown", Word::Unknown),
            ("Running", Word::Fine),
            ("green", Word::Fine),
            ("Provisioning", Word::InProgress),
            ("ApplyingChanges", Word::InProgress),
            ("PENDING_RERUN", Word::InProgress),
            ("Waiting for pods to be ready", Word::InProgress),
            ("ClusterRollingUpgrading", Word::InProgress),
            ("NotReconciled", Word::InProgress),
            ("not synced", Word::InProgress),
            ("HEALTH_WARN", Word::Failed),
        ] {
            assert_eq!(word(v), Some(w), "{v}");
        }
        assert_eq!(word("Statefulset not controlled by operator"), None);
        assert_eq!(word(""), None);
    }
}
