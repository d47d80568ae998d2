//! Health: how well a live object is doing, and the worst of an app's objects.
//!
//! The built-in rules follow Argo CD's gitops-engine (`pkg/health`), so that driftless reaches
//! the verdicts of that project's own test data (`tests/data/conformance/gitops-engine/health`):
//! Deployment, StatefulSet, DaemonSet, ReplicaSet, Pod, Job, PersistentVolumeClaim, Service,
//! Ingress, HorizontalPodAutoscaler and APIService. Every other kind gets kstatus-style generic
//! rules (sigs.k8s.io/cli-utils `kstatus`): `status.observedGeneration` behind
//! `metadata.generation` is Progressing; a `Stalled` or `Failed` condition that is True is
//! Degraded; `Reconciling=True`, `Ready=False` or `Available=False` is Progressing; `Ready=True`
//! or `Available=True` is Healthy; `spec.suspend` or `spec.paused` is Suspended; an object with
//! no status conventions is Healthy. An object being deleted (`metadata.deletionTimestamp`) is
//! Progressing, whatever its kind. Custom rules ([`CustomRules`]) written in CEL come first,
//! per group and kind, in the spirit of Flux's `healthCheckExprs`.
//!
//! Pure: no I/O.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::object::Object;

mod generic;
pub mod lua;
mod operators;

pub use generic::{StatusKinds, is_custom_group};

/// Health of one object or of an app. Ordered from best to worst as ARCHITECTURE.md section 2 gives
/// it: Healthy < Suspended < Progressing < Missing < Degraded < Unknown, so the app's health is
/// the maximum of its objects'.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Health {
    /// Working as declared.
    Healthy,
    /// Deliberately paused (`spec.suspend`, `spec.paused`).
    Suspended,
    /// Not there yet.
    Progressing,
    /// Declared but absent from the store.
    Missing,
    /// Failed.
    Degraded,
    /// Cannot be assessed.
    Unknown,
}

impl std::fmt::Display for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// A health verdict and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assessment {
    /// The verdict.
    pub health: Health,
    /// A sentence for people (may be empty).
    pub message: String,
}

impl Assessment {
    fn new(health: Health, message: impl Into<String>) -> Self {
        Self {
            health,
            message: message.into(),
        }
    }
}

/// The health of an app: the worst of its objects', `Healthy` when it has none.
pub fn worst(healths: impl IntoIterator<Item = Health>) -> Health {
    healths.into_iter().max().unwrap_or(Health::Healthy)
}

/// Which rule gave an object its health (`driftless health -o json` prints it as `rule`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    /// The object is absent (`Missing`) or being deleted (`Progressing`): no rule was asked.
    Lifecycle,
    /// A custom CEL rule of the config's `health[]`.
    Cel,
    /// A Lua health check: its file.
    Lua(String),
    /// A built-in rule written for this group and kind.
    Builtin,
    /// The generic rules, for kinds without a rule of their own.
    Generic,
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rule::Lifecycle => f.write_str("lifecycle"),
            Rule::Cel => f.write_str("cel"),
            Rule::Lua(origin) => write!(f, "lua:{origin}"),
            Rule::Builtin => f.write_str("builtin"),
            Rule::Generic => f.write_str("generic"),
        }
    }
}

/// Assesses a declared object given its live copy (`None` when absent: `Missing`), with the
/// custom rules first and the built-in rules otherwise; `kinds` are the kinds known to have a
/// status subresource (for an object with no status yet).
pub fn assess(live: Option<&Object>, rules: &CustomRules, kinds: &StatusKinds) -> Assessment {
    explain(live, rules, kinds).0
}

/// [`assess`], and which rule decided.
pub fn explain(
    live: Option<&Object>,
    rules: &CustomRules,
    kinds: &StatusKinds,
) -> (Assessment, Rule) {
    let Some(obj) = live else {
        return (
            Assessment::new(Health::Missing, "not in the store"),
            Rule::Lifecycle,
        );
    };
    let live = Live::of(obj);
    if let Some(found) = lifecycle(&live) {
        return found;
    }
    if let Some(found) = rules.assess(obj) {
        return found;
    }
    builtin_explained(&live, kinds)
}

/// [`assess`] by the built-in rules alone (no custom rules) of an object present, whose
/// `metadata.generation` is `generation` although `object` may say otherwise: a store keeps
/// the metadata it sets apart from an object it wrote ([`crate::store::Stored`]), and judging
/// it this way needs no copy of the object with that field set. The other fields a store sets
/// (`resourceVersion`, `creationTimestamp`) are read by no built-in rule.
pub fn assess_builtin_at(object: &Object, generation: u64, kinds: &StatusKinds) -> Assessment {
    let live = Live::new(object.clone(), generation);
    match lifecycle(&live) {
        Some((a, _)) => a,
        None => builtin_explained(&live, kinds).0,
    }
}

/// `Progressing` for an object being deleted (`metadata.deletionTimestamp`), whatever its kind.
fn lifecycle(obj: &Live) -> Option<(Assessment, Rule)> {
    crate::object::field_of(obj.metadata(), "deletionTimestamp")
        .is_some_and(|v| !v.is_null())
        .then(|| {
            (
                Assessment::new(Health::Progressing, "Pending deletion"),
                Rule::Lifecycle,
            )
        })
}

/// The built-in rules alone (no custom rules).
pub fn builtin(obj: &Object, kinds: &StatusKinds) -> Assessment {
    builtin_explained(&Live::of(obj), kinds).0
}

/// The object the built-in rules judge: an [`Object`] (a shared handle: no copy of it is
/// made) and the `metadata.generation` they read, which [`Live::generation`] gives in place
/// of the object's own (see [`assess_builtin_at`]). Every rule of this module and its
/// submodules takes a `&Live`, so that none reads the generation from the object itself.
pub(crate) struct Live {
    object: Object,
    generation: u64,
}

impl Live {
    fn new(object: Object, generation: u64) -> Self {
        Live { object, generation }
    }

    /// `object` with its own `metadata.generation`.
    pub(crate) fn of(object: &Object) -> Self {
        Live::new(object.clone(), object.generation())
    }

    /// `metadata.generation` as the store set it (0 when absent).
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }
}

impl std::ops::Deref for Live {
    type Target = Object;

    fn deref(&self) -> &Object {
        &self.object
    }
}

fn builtin_explained(obj: &Live, kinds: &StatusKinds) -> (Assessment, Rule) {
    if let Some(a) = kind_rule(obj) {
        return (a, Rule::Builtin);
    }
    (generic::assess(obj, kinds), Rule::Generic)
}

/// The built-in rule written for the object's group and kind, if there is one.
fn kind_rule(obj: &Live) -> Option<Assessment> {
    let group = obj.group();
    Some(match (group, obj.kind()) {
        ("apps" | "extensions", "Deployment") => deployment(obj),
        ("apps", "StatefulSet") => statefulset(obj),
        ("apps" | "extensions", "DaemonSet") => daemonset(obj),
        ("apps" | "extensions", "ReplicaSet") => replicaset(obj),
        ("", "Pod") => pod(obj),
        ("batch", "Job") => job(obj),
        ("", "PersistentVolumeClaim") => pvc(obj),
        ("", "Service") => service(obj),
        ("networking.k8s.io" | "extensions", "Ingress") => ingress(obj),
        ("autoscaling", "HorizontalPodAutoscaler") => hpa(obj),
        ("apiregistration.k8s.io", "APIService") => apiservice(obj),
        ("batch", "CronJob") => cronjob(obj),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => crd(obj),
        _ => return operators::assess(obj),
    })
}

// ---------------------------------------------------------------------------------------------
// Field access.

fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, k| cur.get(*k))
}

fn field<'a>(obj: &'a Live, path: &[&str]) -> Option<&'a Value> {
    let (first, rest) = path.split_first()?;
    at(obj.get(first)?, rest)
}

fn int(obj: &Live, path: &[&str]) -> Option<i64> {
    field(obj, path).and_then(Value::as_i64)
}

fn int0(obj: &Live, path: &[&str]) -> i64 {
    int(obj, path).unwrap_or(0)
}

fn string<'a>(obj: &'a Live, path: &[&str]) -> Option<&'a str> {
    field(obj, path).and_then(Value::as_str)
}

fn conditions(obj: &Live) -> Vec<&Map<String, Value>> {
    conditions_in(field(obj, &["status", "conditions"]))
}

/// The mappings of a `conditions` list (anything else in it is skipped); none when `list` is
/// absent or not a list. Shared by the generic and operator rules.
pub(super) fn conditions_in(list: Option<&Value>) -> Vec<&Map<String, Value>> {
    list.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_object).collect())
        .unwrap_or_default()
}

fn condition<'a>(conds: &[&'a Map<String, Value>], type_: &str) -> Option<&'a Map<String, Value>> {
    conds
        .iter()
        .copied()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

/// A string field of a condition (or any mapping), empty when absent or not a string. Shared by
/// the generic and operator rules.
pub(super) fn cstr<'a>(c: &'a Map<String, Value>, k: &str) -> &'a str {
    c.get(k).and_then(Value::as_str).unwrap_or("")
}

/// `status.observedGeneration` has caught up with `metadata.generation`.
fn observed(obj: &Live) -> bool {
    obj.generation() as i64 <= int0(obj, &["status", "observedGeneration"])
}

// ---------------------------------------------------------------------------------------------
// Built-in rules (after gitops-engine pkg/health).

fn deployment(obj: &Live) -> Assessment {
    if field(obj, &["spec", "paused"]).and_then(Value::as_bool) == Some(true) {
        return Assessment::new(Health::Suspended, "Deployment is paused");
    }
    if !observed(obj) {
        return Assessment::new(
            Health::Progressing,
            "Waiting for rollout to finish: observed deployment generation less than desired generation",
        );
    }
    let conds = conditions(obj);
    if let Some(c) = condition(&conds, "Progressing")
        && cstr(c, "reason") == "ProgressDeadlineExceeded"
    {
        return Assessment::new(
            Health::Degraded,
            format!("Deployment {:?} exceeded its progress deadline", obj.name()),
        );
    }
    let updated = int0(obj, &["status", "updatedReplicas"]);
    let replicas = int0(obj, &["status", "replicas"]);
    let available = int0(obj, &["status", "availableReplicas"]);
    if let Some(want) = int(obj, &["spec", "replicas"])
        && updated < want
    {
        return Assessment::new(
            Health::Progressing,
            format!(
                "Waiting for rollout to finish: {updated} out of {want} new replicas have been updated..."
            ),
        );
    }
    if replicas > updated {
        return Assessment::new(
            Health::Progressing,
            format!(
                "Waiting for rollout to finish: {} old replicas are pending termination...",
                replicas - updated
            ),
        );
    }
    if available < updated {
        return Assessment::new(
            Health::Progressing,
            format!(
                "Waiting for rollout to finish: {available} of {updated} updated replicas are available..."
            ),
        );
    }
    Assessment::new(Health::Healthy, "")
}

fn statefulset(obj: &Live) -> Assessment {
    let observed_gen = int0(obj, &["status", "observedGeneration"]);
    if observed_gen == 0 || obj.generation() as i64 > observed_gen {
        return Assessment::new(
            Health::Progressing,
            "Waiting for statefulset spec update to be observed...",
        );
    }
    let ready = int0(obj, &["status", "readyReplicas"]);
    if let Some(want) = int(obj, &["spec", "replicas"])
        && ready < want
    {
        return Assessment::new(
            Health::Progressing,
            format!("Waiting for {} pods to be ready...", want - ready),
        );
    }
    let strategy = string(obj, &["spec", "updateStrategy", "type"]).unwrap_or("RollingUpdate");
    if strategy == "OnDelete" {
        return Assessment::new(
            Health::Healthy,
            format!("statefulset has {ready} ready pods"),
        );
    }
    if let Some(partition) = int(
        obj,
        &["spec", "updateStrategy", "rollingUpdate", "partition"],
    ) {
        let updated = int0(obj, &["status", "updatedReplicas"]);
        if let Some(want) = int(obj, &["spec", "replicas"])
            && updated < want - partition
        {
            return Assessment::new(
                Health::Progressing,
                format!(
                    "Waiting for partitioned roll out to finish: {updated} out of {} new pods have been updated...",
                    want - partition
                ),
            );
        }
        return Assessment::new(
            Health::Healthy,
            format!("partitioned roll out complete: {updated} new pods have been updated..."),
        );
    }
    let current = string(obj, &["status", "currentRevision"]).unwrap_or("");
    let update = string(obj, &["status", "updateRevision"]).unwrap_or("");
    if update != current {
        return Assessment::new(
            Health::Progressing,
            format!(
                "waiting for statefulset rolling update to complete {} pods at revision {update}...",
                int0(obj, &["status", "updatedReplicas"])
            ),
        );
    }
    Assessment::new(
        Health::Healthy,
        format!(
            "statefulset rolling update complete {} pods at revision {current}...",
            int0(obj, &["status", "currentReplicas"])
        ),
    )
}

fn daemonset(obj: &Live) -> Assessment {
    if !observed(obj) {
        return Assessment::new(
            Health::Progressing,
            "Waiting for rollout to finish: observed daemon set generation less than desired generation",
        );
    }
    let desired = int0(obj, &["status", "desiredNumberScheduled"]);
    let updated = int0(obj, &["status", "updatedNumberScheduled"]);
    let available = int0(obj, &["status", "numberAvailable"]);
    if string(obj, &["spec", "updateStrategy", "type"]) == Some("OnDelete") {
        return Assessment::new(
            Health::Healthy,
            format!("daemon set {updated} out of {desired} new pods have been updated"),
        );
    }
    if updated < desired {
        return Assessment::new(
            Health::Progressing,
            format!(
                "Waiting for daemon set {:?} rollout to finish: {updated} out of {desired} new pods have been updated...",
                obj.name()
            ),
        );
    }
    if available < desired {
        return Assessment::new(
            Health::Progressing,
            format!(
                "Waiting for daemon set {:?} rollout to finish: {available} of {desired} updated pods are available...",
                obj.name()
            ),
        );
    }
    Assessment::new(Health::Healthy, "")
}

fn replicaset(obj: &Live) -> Assessment {
    if !observed(obj) {
        return Assessment::new(
            Health::Progressing,
            "Waiting for rollout to finish: observed replica set generation less than desired generation",
        );
    }
    let conds = conditions(obj);
    if let Some(c) = condition(&conds, "ReplicaFailure")
        && cstr(c, "status") == "True"
    {
        return Assessment::new(Health::Degraded, cstr(c, "message"));
    }
    let available = int0(obj, &["status", "availableReplicas"]);
    if let Some(want) = int(obj, &["spec", "replicas"])
        && available < want
    {
        return Assessment::new(
            Health::Progressing,
            format!(
                "Waiting for rollout to finish: {available} out of {want} new replicas are available..."
            ),
        );
    }
    Assessment::new(Health::Healthy, "")
}

fn pod(obj: &Live) -> Assessment {
    let message = string(obj, &["status", "message"])
        .unwrap_or("")
        .to_string();
    let policy = string(obj, &["spec", "restartPolicy"]).unwrap_or("Always");
    let statuses: Vec<&Value> = field(obj, &["status", "containerStatuses"])
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    if policy == "Always" {
        // Containers stuck in a failing wait (CrashLoopBackOff, ImagePullBackOff, ErrImagePull...).
        let failing: Vec<&str> = statuses
            .iter()
            .filter_map(|s| at(s, &["state", "waiting"]))
            .filter(|w| {
                let reason = w.get("reason").and_then(Value::as_str).unwrap_or("");
                reason.starts_with("Err")
                    || reason.ends_with("Error")
                    || reason.ends_with("BackOff")
            })
            .map(|w| w.get("message").and_then(Value::as_str).unwrap_or(""))
            .collect();
        if !failing.is_empty() {
            return Assessment::new(Health::Degraded, failing.join(", "));
        }
    }
    match string(obj, &["status", "phase"]).unwrap_or("") {
        "Pending" => Assessment::new(Health::Progressing, message),
        "Succeeded" => Assessment::new(Health::Healthy, message),
        "Failed" => {
            if !message.is_empty() {
                return Assessment::new(Health::Degraded, message);
            }
            let terminated: Vec<&str> = statuses
                .iter()
                .filter_map(|s| at(s, &["state", "terminated", "message"]).and_then(Value::as_str))
                .collect();
            Assessment::new(Health::Degraded, terminated.join(", "))
        }
        "Running" => match policy {
            "Always" => {
                let conds = conditions(obj);
                if condition(&conds, "Ready").is_some_and(|c| cstr(c, "status") == "True") {
                    return Assessment::new(Health::Healthy, message);
                }
                if statuses
                    .iter()
                    .any(|s| at(s, &["lastState", "terminated"]).is_some())
                {
                    return Assessment::new(Health::Degraded, message);
                }
                Assessment::new(Health::Progressing, message)
            }
            // Pods that run to completion (hooks, jobs' pods) are Progressing while they run.
            _ => Assessment::new(Health::Progressing, message),
        },
        _ => Assessment::new(Health::Unknown, message),
    }
}

fn job(obj: &Live) -> Assessment {
    let (mut complete, mut failed, mut suspended) = (false, false, false);
    let (mut message, mut fail_message) = (String::new(), String::new());
    for c in conditions(obj) {
        match cstr(c, "type") {
            "Failed" => {
                failed = true;
                complete = true;
                fail_message = cstr(c, "message").to_string();
            }
            "Complete" => {
                complete = true;
                message = cstr(c, "message").to_string();
            }
            "Suspended" => {
                complete = true;
                message = cstr(c, "message").to_string();
                if cstr(c, "status") == "True" {
                    suspended = true;
                }
            }
            _ => {}
        }
    }
    if !complete {
        Assessment::new(Health::Progressing, message)
    } else if failed {
        Assessment::new(Health::Degraded, fail_message)
    } else if suspended {
        Assessment::new(Health::Suspended, message)
    } else {
        Assessment::new(Health::Healthy, message)
    }
}

fn pvc(obj: &Live) -> Assessment {
    match string(obj, &["status", "phase"]).unwrap_or("") {
        "Lost" => Assessment::new(Health::Degraded, ""),
        "Pending" => Assessment::new(Health::Progressing, ""),
        "Bound" => Assessment::new(Health::Healthy, ""),
        _ => Assessment::new(Health::Unknown, "no status.phase"),
    }
}

fn has_ingress_points(obj: &Live) -> bool {
    field(obj, &["status", "loadBalancer", "ingress"])
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
}

fn service(obj: &Live) -> Assessment {
    if string(obj, &["spec", "type"]) == Some("LoadBalancer") && !has_ingress_points(obj) {
        return Assessment::new(
            Health::Progressing,
            "Waiting for the load balancer to get an address",
        );
    }
    Assessment::new(Health::Healthy, "")
}

fn ingress(obj: &Live) -> Assessment {
    if has_ingress_points(obj) {
        Assessment::new(Health::Healthy, "")
    } else {
        Assessment::new(
            Health::Progressing,
            "Waiting for the ingress to get an address",
        )
    }
}

fn hpa(obj: &Live) -> Assessment {
    // autoscaling/v1 keeps its conditions in an annotation.
    let conds: Vec<Map<String, Value>> = if obj.version() == "v1" {
        obj.metadata()
            .get("annotations")
            .and_then(|a| a.get("autoscaling.alpha.kubernetes.io/conditions"))
            .and_then(Value::as_str)
            .and_then(|s| serde_json::from_str::<Vec<Map<String, Value>>>(s).ok())
            .unwrap_or_default()
    } else {
        conditions(obj).into_iter().cloned().collect()
    };
    const DEGRADED: &[(&str, &str)] = &[
        ("AbleToScale", "FailedGetScale"),
        ("AbleToScale", "FailedUpdateScale"),
        ("ScalingActive", "FailedGetResourceMetric"),
        ("ScalingActive", "InvalidSelector"),
    ];
    for c in &conds {
        let pair = (cstr(c, "type"), cstr(c, "reason"));
        if DEGRADED.contains(&pair) {
            return Assessment::new(Health::Degraded, cstr(c, "message"));
        }
        // Able to scale, or limited by its bounds: the autoscaler works.
        if matches!(pair.0, "AbleToScale" | "ScalingLimited") && cstr(c, "status") == "True" {
            return Assessment::new(Health::Healthy, cstr(c, "message"));
        }
    }
    Assessment::new(Health::Progressing, "Waiting to Autoscale")
}

fn apiservice(obj: &Live) -> Assessment {
    let conds = conditions(obj);
    match condition(&conds, "Available") {
        Some(c) if cstr(c, "status") == "True" => {
            Assessment::new(Health::Healthy, cstr(c, "message"))
        }
        Some(c) => Assessment::new(
            Health::Progressing,
            format!("{}: {}", cstr(c, "reason"), cstr(c, "message")),
        ),
        None => Assessment::new(Health::Progressing, "Waiting to be processed"),
    }
}

/// A CronJob (batch/v1): `spec.suspend` is Suspended; a last run that did not succeed (no job
/// active and `status.lastSuccessfulTime` before `status.lastScheduleTime`, RFC 3339 times that
/// compare as text) is Degraded; otherwise Healthy: nothing in its status says a schedule was
/// missed (Kubernetes' CronJob documentation, "Job creation").
fn cronjob(obj: &Live) -> Assessment {
    if field(obj, &["spec", "suspend"]).and_then(Value::as_bool) == Some(true) {
        return Assessment::new(Health::Suspended, "spec.suspend is true");
    }
    let active = field(obj, &["status", "active"])
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    match (
        string(obj, &["status", "lastScheduleTime"]),
        string(obj, &["status", "lastSuccessfulTime"]),
    ) {
        (Some(_), _) if active => Assessment::new(Health::Healthy, "a job is running"),
        (Some(scheduled), Some(succeeded)) if succeeded < scheduled => Assessment::new(
            Health::Degraded,
            format!("the run of {scheduled} has not succeeded (last success {succeeded})"),
        ),
        (Some(_), None) => Assessment::new(
            Health::Healthy,
            "no run has succeeded yet (the first may still be running)",
        ),
        (Some(_), Some(_)) => Assessment::new(Health::Healthy, "the last run succeeded"),
        (None, _) => Assessment::new(Health::Healthy, "not scheduled yet"),
    }
}

/// A CustomResourceDefinition: `NonStructuralSchema=True` is Degraded (the API server serves it
/// but refuses to publish its schema); `Terminating=True` is Progressing; `Established=True`
/// and `NamesAccepted=True` are Healthy; otherwise Progressing (the apiextensions conditions).
fn crd(obj: &Live) -> Assessment {
    let conds = conditions(obj);
    let is = |t: &str, s: &str| condition(&conds, t).is_some_and(|c| cstr(c, "status") == s);
    let say = |t: &str| {
        condition(&conds, t)
            .map(|c| format!("{t}: {}", cstr(c, "message")))
            .unwrap_or_else(|| t.to_string())
    };
    if is("NonStructuralSchema", "True") {
        return Assessment::new(Health::Degraded, say("NonStructuralSchema"));
    }
    if is("Terminating", "True") {
        return Assessment::new(Health::Progressing, say("Terminating"));
    }
    if is("NamesAccepted", "False") {
        return Assessment::new(Health::Degraded, say("NamesAccepted"));
    }
    if is("Established", "True") && is("NamesAccepted", "True") {
        return Assessment::new(Health::Healthy, say("Established"));
    }
    Assessment::new(Health::Progressing, "waiting to be established")
}

// ---------------------------------------------------------------------------------------------
// Custom rules: CEL expressions and Lua checks.

/// One custom rule for a group and kind: CEL expressions, or a Lua health check in Argo CD's
/// format ([`lua::LuaCheck`]). `group` and `kind` may hold `*`, matching any run of
/// characters (as Argo CD's `resource.customizations.health.*.crossplane.io_*` keys do).
///
/// CEL: each expression sees the object's top-level fields as variables (`metadata`, `spec`,
/// `status`, ..., absent ones as `{}`) and the whole object as `object`, and must give a
/// boolean. They are tried in the order degraded, healthy, progressing; the first true one
/// gives the health; when none is true the next rules decide.
///
/// Lua: the check's `hs.status` and `hs.message` are the verdict; a check that returns nothing
/// (`nil`, `{}`) leaves it to the next rules; one that fails is `Unknown` with the reason.
#[derive(Clone)]
pub struct CustomRule {
    /// API group (empty for core); `*` matches any run of characters.
    pub group: String,
    /// Kind; `*` matches any run of characters.
    pub kind: String,
    check: Check,
}

#[derive(Clone)]
enum Check {
    Cel {
        degraded: Option<(String, Arc<cel::Program>)>,
        healthy: Option<(String, Arc<cel::Program>)>,
        progressing: Option<(String, Arc<cel::Program>)>,
    },
    Lua(lua::LuaCheck),
}

impl CustomRule {
    fn matches(&self, group: &str, kind: &str) -> bool {
        glob(&self.group, group) && glob(&self.kind, kind)
    }

    fn is_wildcard(&self) -> bool {
        self.group.contains('*') || self.kind.contains('*')
    }
}

/// Whether `text` matches `pattern`, where `*` matches any run of characters (none included).
fn glob(pattern: &str, text: &str) -> bool {
    let Some((first, rest)) = pattern.split_once('*') else {
        return pattern == text;
    };
    let Some(mut remaining) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = rest.split('*').collect();
    let (last, middle) = parts.split_last().expect("split gives one part at least");
    for part in middle {
        match remaining.find(part) {
            Some(i) => remaining = &remaining[i + part.len()..],
            None => return false,
        }
    }
    remaining.len() >= last.len() && remaining.ends_with(last)
}

/// Errors from compiling a rule.
#[derive(Debug, thiserror::Error)]
#[error("invalid CEL expression `{expression}`: {message}")]
pub struct RuleError {
    /// The expression.
    pub expression: String,
    /// What the CEL parser said.
    pub message: String,
}

fn compile(expr: Option<&str>) -> Result<Option<(String, Arc<cel::Program>)>, RuleError> {
    expr.map(|e| {
        cel::Program::compile(e)
            .map(|p| (e.to_string(), Arc::new(p)))
            .map_err(|err| RuleError {
                expression: e.to_string(),
                message: err
                    .to_string()
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_string(),
            })
    })
    .transpose()
}

impl CustomRule {
    /// Compiles a CEL rule.
    ///
    /// # Errors
    ///
    /// [`RuleError`] when an expression does not parse.
    pub fn new(
        group: &str,
        kind: &str,
        healthy: Option<&str>,
        progressing: Option<&str>,
        degraded: Option<&str>,
    ) -> Result<Self, RuleError> {
        Ok(Self {
            group: group.to_string(),
            kind: kind.to_string(),
            check: Check::Cel {
                degraded: compile(degraded)?,
                healthy: compile(healthy)?,
                progressing: compile(progressing)?,
            },
        })
    }

    /// A rule that runs a Lua health check (compiled already: [`lua::LuaCheck::from_file`]).
    pub fn lua(group: &str, kind: &str, check: lua::LuaCheck) -> Self {
        Self {
            group: group.to_string(),
            kind: kind.to_string(),
            check: Check::Lua(check),
        }
    }
}

/// The custom rules of a config: its `health[]` entries (CEL or Lua), then a folder of Lua
/// checks laid out like Argo CD's `resource_customizations/` (`healthLuaDir`).
///
/// Which wins when several match: the `health[]` entries for the exact group and kind, in
/// config order, then those with `*`, in config order; then the folder's check for the exact
/// group and kind, then its wildcard folders (`_`). The first that matches is asked; when it
/// gives no verdict (no CEL expression true, a Lua check returning nothing), the next that
/// matches is asked, and after them the built-in rules.
#[derive(Clone, Default)]
pub struct CustomRules {
    rules: Vec<CustomRule>,
    dir: Option<Arc<lua::LuaDir>>,
}

impl CustomRules {
    /// Rules from a list, in the order they are tried (exact ones before wildcard ones).
    pub fn new(rules: Vec<CustomRule>) -> Self {
        Self { rules, dir: None }
    }

    /// No custom rules.
    pub fn none() -> Self {
        Self::default()
    }

    /// True when there are no custom rules (neither listed nor a Lua folder): every verdict
    /// is then the built-in rules', which depend on the object, driftless's version and, for
    /// an object with no status yet, the CustomResourceDefinitions in view.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.dir.is_none()
    }

    /// These rules, then the checks of a folder laid out like Argo CD's
    /// `resource_customizations/`.
    pub fn with_lua_dir(mut self, dir: lua::LuaDir) -> Self {
        self.dir = Some(Arc::new(dir));
        self
    }

    /// Whether any rule is a Lua check (which may run up to [`lua::TIME_LIMIT`] per object:
    /// callers on an async runtime run such assessments where blocking is allowed).
    pub fn has_lua(&self) -> bool {
        self.dir.as_ref().is_some_and(|d| !d.is_empty())
            || self.rules.iter().any(|r| matches!(r.check, Check::Lua(_)))
    }

    /// The custom verdict for `obj` and the rule that gave it, or `None` when no rule applies
    /// or none gives a verdict. A CEL expression that fails to evaluate or gives a non-boolean
    /// is `Unknown`, naming the expression; a Lua check that fails is `Unknown` with why.
    pub fn assess(&self, obj: &Object) -> Option<(Assessment, Rule)> {
        let (group, kind) = (obj.group(), obj.kind());
        let exact = self
            .rules
            .iter()
            .filter(|r| !r.is_wildcard() && r.matches(group, kind));
        let wild = self
            .rules
            .iter()
            .filter(|r| r.is_wildcard() && r.matches(group, kind));
        for rule in exact.chain(wild) {
            let verdict = match &rule.check {
                Check::Cel {
                    degraded,
                    healthy,
                    progressing,
                } => cel_assess(
                    obj,
                    [
                        (Health::Degraded, degraded),
                        (Health::Healthy, healthy),
                        (Health::Progressing, progressing),
                    ],
                )
                .map(|a| (a, Rule::Cel)),
                Check::Lua(check) => check
                    .assess(obj)
                    .map(|a| (a, Rule::Lua(check.origin().to_string()))),
            };
            if verdict.is_some() {
                return verdict;
            }
        }
        let check = self.dir.as_ref()?.find(group, kind)?;
        check
            .assess(obj)
            .map(|a| (a, Rule::Lua(check.origin().to_string())))
    }
}

type CelExpr = Option<(String, Arc<cel::Program>)>;

/// Runs a CEL rule's expressions in order; the first true one gives the health.
fn cel_assess(obj: &Object, exprs: [(Health, &CelExpr); 3]) -> Option<Assessment> {
    let mut ctx = cel::Context::default();
    for name in ["metadata", "spec", "status"] {
        let v = obj.get(name).cloned().unwrap_or(Value::Object(Map::new()));
        if ctx.add_variable(name, v).is_err() {
            return Some(Assessment::new(
                Health::Unknown,
                format!("cannot pass `{name}` to the health rule"),
            ));
        }
    }
    for (k, v) in obj.as_map() {
        if !matches!(k.as_str(), "metadata" | "spec" | "status") && is_identifier(k) {
            let _ = ctx.add_variable(k.as_str(), v.clone());
        }
    }
    let _ = ctx.add_variable("object", Value::from(obj.clone()));
    for (health, expr) in exprs {
        let Some((source, program)) = expr else {
            continue;
        };
        match program.execute(&ctx) {
            Ok(cel::Value::Bool(true)) => {
                return Some(Assessment::new(health, format!("custom rule: {source}")));
            }
            Ok(cel::Value::Bool(false)) => {}
            // CEL quotes operands in its errors and a wrong result is a value of the
            // object: neither is shown for a Secret.
            Ok(other) if obj.is_secret() => {
                return Some(Assessment::new(
                    Health::Unknown,
                    format!(
                        "custom rule `{source}` gave a {}, not a boolean (the value is not shown: this is a Secret)",
                        cel_type(&other)
                    ),
                ));
            }
            Ok(other) => {
                return Some(Assessment::new(
                    Health::Unknown,
                    format!(
                        "custom rule `{source}` gave {}, not a boolean",
                        cel_shown(&other)
                    ),
                ));
            }
            Err(_) if obj.is_secret() => {
                return Some(Assessment::new(
                    Health::Unknown,
                    format!(
                        "custom rule `{source}` failed (the error is not shown: it may quote this Secret's values)"
                    ),
                ));
            }
            Err(e) => {
                return Some(Assessment::new(
                    Health::Unknown,
                    format!("custom rule `{source}` failed: {e}"),
                ));
            }
        }
    }
    None
}

/// The CEL type name of a value (`string`, `int`, ...), as the CEL spec names them.
fn cel_type(v: &cel::Value) -> &'static str {
    match v {
        cel::Value::String(_) => "string",
        cel::Value::Int(_) => "int",
        cel::Value::UInt(_) => "uint",
        cel::Value::Float(_) => "double",
        cel::Value::Bytes(_) => "bytes",
        cel::Value::List(_) => "list",
        cel::Value::Map(_) => "map",
        cel::Value::Null => "null",
        _ => "value of another type",
    }
}

/// A CEL value as a message shows it: a number, boolean or null as CEL writes it, a string
/// quoted and cut to 64 characters, any other value by its type (`a list`).
fn cel_shown(v: &cel::Value) -> String {
    match v {
        cel::Value::Int(i) => i.to_string(),
        cel::Value::UInt(u) => format!("{u}u"),
        cel::Value::Float(f) => f.to_string(),
        cel::Value::Bool(b) => b.to_string(),
        cel::Value::Null => "null".to_string(),
        cel::Value::String(s) => {
            let mut shown: String = s.chars().take(64).collect();
            if shown.len() < s.len() {
                shown.push_str("...");
            }
            format!("the string {shown:?}")
        }
        other => format!("a {}", cel_type(other)),
    }
}

fn is_identifier(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `health[]`: a custom health rule for one group and kind: CEL expressions (in the spirit of
/// Flux's `healthCheckExprs`), or a Lua health check in Argo CD's format (`lua: FILE`, the
/// script Argo CD keeps as `resource.customizations.health.<group>_<kind>`). Each CEL
/// expression sees the object's top-level fields as variables (`metadata`, `spec`,
/// `status`...; absent ones as `{}`) and the whole object as `object`. `group` and `kind` may
/// hold `*` (any run of characters).
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HealthRuleConfig {
    /// API group; empty or left out for the core group.
    #[serde(default)]
    pub group: String,
    /// Kind.
    pub kind: String,
    /// True when the object is healthy.
    #[serde(default)]
    pub healthy: Option<serde_saphyr::Spanned<String>>,
    /// True when it is progressing.
    #[serde(default)]
    pub progressing: Option<serde_saphyr::Spanned<String>>,
    /// True when it is degraded (tried first).
    #[serde(default)]
    pub degraded: Option<serde_saphyr::Spanned<String>>,
    /// A Lua health check file in Argo CD's format, relative to the config file (instead of
    /// the CEL expressions).
    #[serde(default)]
    pub lua: Option<serde_saphyr::Spanned<std::path::PathBuf>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Object {
        Object::from_value(v).unwrap()
    }

    fn h(v: Value) -> Health {
        assess(Some(&obj(v)), &CustomRules::none(), &StatusKinds::none()).health
    }

    #[test]
    fn app_health_is_the_worst_in_the_documented_order() {
        use Health::*;
        assert_eq!(worst([Healthy, Suspended]), Suspended);
        assert_eq!(worst([Progressing, Suspended, Healthy]), Progressing);
        assert_eq!(worst([Progressing, Missing]), Missing);
        assert_eq!(worst([Missing, Degraded]), Degraded);
        assert_eq!(worst([Degraded, Unknown]), Unknown);
        assert_eq!(worst([]), Healthy);
    }

    #[test]
    fn absent_objects_are_missing_and_deleting_ones_progressing() {
        assert_eq!(
            assess(None, &CustomRules::none(), &StatusKinds::none()).health,
            Health::Missing
        );
        assert_eq!(
            h(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "deletionTimestamp": "2026-01-01T00:00:00Z"}})
            ),
            Health::Progressing
        );
    }

    /// The built-in rules read the generation given beside an object (a store's), not the
    /// object's own: every kind whose rule reads it, with a status of generation 2.
    #[test]
    fn builtin_rules_read_the_generation_given_beside_the_object() {
        let kinds = StatusKinds::none();
        for (api_version, kind) in [
            ("apps/v1", "Deployment"),
            ("apps/v1", "StatefulSet"),
            ("apps/v1", "DaemonSet"),
            ("apps/v1", "ReplicaSet"),
            ("example.com/v1", "Widget"),
        ] {
            let status = json!({"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1,
                "readyReplicas": 1, "availableReplicas": 1, "currentReplicas": 1,
                "desiredNumberScheduled": 1, "updatedNumberScheduled": 1, "numberAvailable": 1,
                "numberReady": 1, "currentRevision": "r", "updateRevision": "r"});
            let at = |generation: Option<u64>| {
                let mut meta = json!({"name": "x"});
                if let Some(g) = generation {
                    meta["generation"] = json!(g);
                }
                obj(
                    json!({"apiVersion": api_version, "kind": kind, "metadata": meta,
                    "spec": {"replicas": 1}, "status": status}),
                )
            };
            let behind = builtin(&at(Some(3)), &kinds);
            assert_eq!(behind.health, Health::Progressing, "{kind}: {behind:?}");
            assert_ne!(builtin(&at(Some(2)), &kinds), behind, "{kind}");
            // The object says nothing (or generation 2): the generation given decides.
            assert_eq!(assess_builtin_at(&at(None), 3, &kinds), behind, "{kind}");
            assert_eq!(assess_builtin_at(&at(Some(2)), 3, &kinds), behind, "{kind}");
            assert_eq!(
                assess_builtin_at(&at(Some(3)), 2, &kinds),
                builtin(&at(Some(2)), &kinds),
                "{kind}"
            );
        }
    }

    #[test]
    fn deployment_rules() {
        let d = |spec: Value, status: Value, generation: u64| {
            h(
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "generation": generation}, "spec": spec, "status": status}),
            )
        };
        assert_eq!(
            d(json!({"replicas": 2}), json!({}), 1),
            Health::Progressing,
            "not observed yet"
        );
        assert_eq!(
            d(
                json!({"replicas": 2}),
                json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}),
                1
            ),
            Health::Healthy
        );
        assert_eq!(
            d(
                json!({"replicas": 2}),
                json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 1, "availableReplicas": 1}),
                1
            ),
            Health::Progressing
        );
        assert_eq!(
            d(
                json!({"replicas": 2}),
                json!({"observedGeneration": 1, "replicas": 3, "updatedReplicas": 2, "availableReplicas": 2}),
                1
            ),
            Health::Progressing,
            "old replicas terminating"
        );
        assert_eq!(
            d(
                json!({"replicas": 2}),
                json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 1}),
                1
            ),
            Health::Progressing
        );
        assert_eq!(
            d(json!({"replicas": 2, "paused": true}), json!({}), 1),
            Health::Suspended
        );
        assert_eq!(
            d(
                json!({}),
                json!({"observedGeneration": 1, "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]}),
                1
            ),
            Health::Degraded
        );
    }

    #[test]
    fn statefulset_daemonset_replicaset_rules() {
        let sts = |spec: Value, status: Value| {
            h(
                json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s", "generation": 1}, "spec": spec, "status": status}),
            )
        };
        assert_eq!(sts(json!({"replicas": 1}), json!({})), Health::Progressing);
        assert_eq!(
            sts(
                json!({"replicas": 2}),
                json!({"observedGeneration": 1, "readyReplicas": 1})
            ),
            Health::Progressing
        );
        assert_eq!(
            sts(
                json!({"replicas": 1}),
                json!({"observedGeneration": 1, "readyReplicas": 1, "currentRevision": "a", "updateRevision": "b"})
            ),
            Health::Progressing
        );
        assert_eq!(
            sts(
                json!({"replicas": 1}),
                json!({"observedGeneration": 1, "readyReplicas": 1, "currentRevision": "a", "updateRevision": "a"})
            ),
            Health::Healthy
        );
        assert_eq!(
            sts(
                json!({"replicas": 1, "updateStrategy": {"type": "OnDelete"}}),
                json!({"observedGeneration": 1, "readyReplicas": 1, "currentRevision": "a", "updateRevision": "b"})
            ),
            Health::Healthy
        );
        assert_eq!(
            sts(
                json!({"replicas": 3, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}}),
                json!({"observedGeneration": 1, "readyReplicas": 3, "updatedReplicas": 0})
            ),
            Health::Progressing
        );
        let ds = |status: Value| {
            h(
                json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "d", "generation": 1}, "status": status}),
            )
        };
        assert_eq!(
            ds(
                json!({"observedGeneration": 1, "desiredNumberScheduled": 2, "updatedNumberScheduled": 1, "numberAvailable": 1})
            ),
            Health::Progressing
        );
        assert_eq!(
            ds(
                json!({"observedGeneration": 1, "desiredNumberScheduled": 2, "updatedNumberScheduled": 2, "numberAvailable": 1})
            ),
            Health::Progressing
        );
        assert_eq!(
            ds(
                json!({"observedGeneration": 1, "desiredNumberScheduled": 2, "updatedNumberScheduled": 2, "numberAvailable": 2})
            ),
            Health::Healthy
        );
        let rs = |status: Value| {
            h(
                json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "r", "generation": 1}, "spec": {"replicas": 2}, "status": status}),
            )
        };
        assert_eq!(
            rs(json!({"observedGeneration": 1, "availableReplicas": 2})),
            Health::Healthy
        );
        assert_eq!(
            rs(json!({"observedGeneration": 1, "availableReplicas": 1})),
            Health::Progressing
        );
        assert_eq!(
            rs(
                json!({"observedGeneration": 1, "conditions": [{"type": "ReplicaFailure", "status": "True", "message": "quota"}]})
            ),
            Health::Degraded
        );
    }

    #[test]
    fn pod_job_pvc_service_ingress_hpa_apiservice_rules() {
        let pod = |policy: &str, status: Value| {
            h(
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"restartPolicy": policy}, "status": status}),
            )
        };
        assert_eq!(
            pod("Always", json!({"phase": "Pending"})),
            Health::Progressing
        );
        assert_eq!(
            pod(
                "Always",
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]})
            ),
            Health::Healthy
        );
        assert_eq!(
            pod(
                "Always",
                json!({"phase": "Running", "containerStatuses": [{"state": {"waiting": {"reason": "CrashLoopBackOff"}}}]})
            ),
            Health::Degraded
        );
        assert_eq!(
            pod("Never", json!({"phase": "Running"})),
            Health::Progressing
        );
        assert_eq!(pod("Never", json!({"phase": "Succeeded"})), Health::Healthy);
        assert_eq!(pod("Never", json!({"phase": "Failed"})), Health::Degraded);
        let job = |conds: Value| {
            h(
                json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "status": {"conditions": conds}}),
            )
        };
        assert_eq!(job(json!([])), Health::Progressing);
        assert_eq!(
            job(json!([{"type": "Complete", "status": "True"}])),
            Health::Healthy
        );
        assert_eq!(
            job(json!([{"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}])),
            Health::Degraded
        );
        assert_eq!(
            job(json!([{"type": "Suspended", "status": "True"}])),
            Health::Suspended
        );
        let pvc = |phase: &str| {
            h(
                json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c"}, "status": {"phase": phase}}),
            )
        };
        assert_eq!(
            (pvc("Bound"), pvc("Pending"), pvc("Lost")),
            (Health::Healthy, Health::Progressing, Health::Degraded)
        );
        let svc = |t: &str, status: Value| {
            h(
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"type": t}, "status": status}),
            )
        };
        assert_eq!(svc("ClusterIP", json!({})), Health::Healthy);
        assert_eq!(
            svc("LoadBalancer", json!({"loadBalancer": {}})),
            Health::Progressing
        );
        assert_eq!(
            svc(
                "LoadBalancer",
                json!({"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}})
            ),
            Health::Healthy
        );
        let ing = |status: Value| {
            h(
                json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "i"}, "status": status}),
            )
        };
        assert_eq!(
            ing(json!({"loadBalancer": {"ingress": [{"hostname": "x"}]}})),
            Health::Healthy
        );
        assert_eq!(ing(json!({})), Health::Progressing);
        let hpa = |conds: Value| {
            h(
                json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"}, "status": {"conditions": conds}}),
            )
        };
        assert_eq!(
            hpa(json!([{"type": "AbleToScale", "reason": "FailedGetScale"}])),
            Health::Degraded
        );
        assert_eq!(
            hpa(json!([{"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale"}])),
            Health::Healthy
        );
        assert_eq!(
            hpa(
                json!([{"type": "ScalingActive", "status": "True"}, {"type": "ScalingLimited", "status": "False", "reason": "DesiredWithinRange"}])
            ),
            Health::Progressing
        );
        assert_eq!(hpa(json!([])), Health::Progressing);
        let api = |status: &str| {
            h(
                json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "v1.x"}, "status": {"conditions": [{"type": "Available", "status": status}]}}),
            )
        };
        assert_eq!(
            (api("True"), api("False")),
            (Health::Healthy, Health::Progressing)
        );
    }

    #[test]
    fn generic_kstatus_rules() {
        let g = |v: Value| {
            let mut base = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "generation": 2}});
            base.as_object_mut()
                .unwrap()
                .extend(v.as_object().unwrap().clone());
            h(base)
        };
        assert_eq!(g(json!({})), Health::Healthy, "no status conventions");
        assert_eq!(g(json!({"spec": {"suspend": true}})), Health::Suspended);
        assert_eq!(g(json!({"spec": {"paused": true}})), Health::Suspended);
        assert_eq!(
            g(json!({"status": {"observedGeneration": 1}})),
            Health::Progressing
        );
        assert_eq!(
            g(
                json!({"status": {"observedGeneration": 2, "conditions": [{"type": "Stalled", "status": "True"}]}})
            ),
            Health::Degraded
        );
        assert_eq!(
            g(json!({"status": {"conditions": [{"type": "Failed", "status": "True"}]}})),
            Health::Degraded
        );
        assert_eq!(
            g(json!({"status": {"conditions": [{"type": "Reconciling", "status": "True"}]}})),
            Health::Progressing
        );
        assert_eq!(
            g(json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}})),
            Health::Progressing
        );
        assert_eq!(
            g(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})),
            Health::Healthy
        );
        assert_eq!(
            g(json!({"status": {"conditions": [{"type": "Available", "status": "False"}]}})),
            Health::Progressing
        );
    }

    #[test]
    fn a_custom_rule_failing_on_a_secret_never_quotes_its_values() {
        let rules = CustomRules::new(vec![
            CustomRule::new(
                "",
                "Secret",
                Some("object.stringData.password + 1 > 0"),
                None,
                Some("object.data.token + 1 > 0"),
            )
            .unwrap(),
        ]);
        let secret = obj(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "stringData": {"password": "SUPERSECRETVALUE123"}, "data": {"token": "U1VQRVJTRUNSRVQ="}}),
        );
        let a = assess(Some(&secret), &rules, &StatusKinds::none());
        assert_eq!(a.health, Health::Unknown);
        assert!(a.message.contains("not shown"), "{}", a.message);
        assert!(
            !a.message.contains("SUPERSECRET") && !a.message.contains("U1VQ"),
            "{}",
            a.message
        );
        let returns = CustomRules::new(vec![
            CustomRule::new("", "Secret", Some("object.stringData.password"), None, None).unwrap(),
        ]);
        let a = assess(Some(&secret), &returns, &StatusKinds::none());
        assert!(a.message.contains("gave a string"), "{}", a.message);
        assert!(!a.message.contains("SUPERSECRET"), "{}", a.message);
    }

    #[test]
    fn a_custom_rule_that_gives_no_boolean_says_what_it_gave() {
        let widget = obj(json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w"}, "status": {"conditions": [{}, {}], "phase": "Up"}}));
        for (expr, shown) in [
            ("status.conditions.size()", "gave 2, not a boolean"),
            ("status.phase", "gave the string \"Up\", not a boolean"),
            ("status.conditions", "gave a list, not a boolean"),
        ] {
            let rules = CustomRules::new(vec![
                CustomRule::new("example.com", "Widget", Some(expr), None, None).unwrap(),
            ]);
            let a = assess(Some(&widget), &rules, &StatusKinds::none());
            assert_eq!(a.health, Health::Unknown);
            assert!(a.message.contains(shown), "{expr}: {}", a.message);
        }
    }

    #[test]
    fn custom_cel_rules_come_first_and_fall_back_to_the_built_in_ones() {
        let rules = CustomRules::new(vec![
            CustomRule::new(
                "example.com",
                "Widget",
                Some("status.phase == 'Running'"),
                Some("has(status.phase) && status.phase == 'Starting'"),
                Some("has(status.errors) && size(status.errors) > 0"),
            )
            .unwrap(),
        ]);
        let w = |status: Value| {
            assess(
                Some(&obj(
                    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "status": status}),
                )),
                &rules,
                &StatusKinds::none(),
            )
        };
        assert_eq!(w(json!({"phase": "Running"})).health, Health::Healthy);
        assert_eq!(w(json!({"phase": "Starting"})).health, Health::Progressing);
        assert_eq!(
            w(json!({"phase": "Running", "errors": ["x"]})).health,
            Health::Degraded,
            "degraded is tried first"
        );
        // Nothing true: the built-in (generic) rules decide.
        assert_eq!(
            w(json!({"phase": "Other", "conditions": [{"type": "Ready", "status": "False"}]}))
                .health,
            Health::Progressing
        );
        // Evaluation errors are Unknown and name the expression.
        let broken = CustomRules::new(vec![
            CustomRule::new(
                "example.com",
                "Widget",
                Some("status.nope.deeper == 1"),
                None,
                None,
            )
            .unwrap(),
        ]);
        let a = assess(
            Some(&obj(
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}),
            )),
            &broken,
            &StatusKinds::none(),
        );
        assert_eq!(a.health, Health::Unknown);
        assert!(
            a.message.contains("status.nope.deeper == 1"),
            "{}",
            a.message
        );
        // Other kinds are untouched.
        let other = assess(
            Some(&obj(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
            )),
            &rules,
            &StatusKinds::none(),
        );
        assert_eq!(other.health, Health::Healthy);
        assert!(CustomRule::new("", "X", Some("(("), None, None).is_err());
    }
}
