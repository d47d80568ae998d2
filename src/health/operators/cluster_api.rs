//! Cluster API (`cluster.x-k8s.io`, `addons.cluster.x-k8s.io`): Cluster, Machine,
//! MachineDeployment, MachineSet, MachinePool, MachineHealthCheck, ClusterResourceSet.
//!
//! Cluster API writes two shapes of conditions. The v1beta1 shape (`clusterv1.Condition`) has a
//! `severity` (`Error`, `Warning`, `Info`) on a `False` condition and a `Ready` summary; the
//! v1beta2 shape is `metav1.Condition`, with `Available` as the summary. An object of API
//! version v1beta1 (or older) keeps the first in `status.conditions` and, from Cluster API
//! v1.9, the second in `status.v1beta2.conditions`; one of API version v1beta2 keeps the second
//! in `status.conditions` and the first in `status.deprecated.v1beta1.conditions`
//! (`docs/proposals/20240916-improve-status-in-CAPI-resources.md`).

use serde_json::Value;

use super::{
    Assessment, Cond, Health, annotation, conditions_in, cstr, find, generation_lag, int_at,
    phase_message, say, state, status, str_at, terminal_reason, true_at, value, verdict, waiting,
};
use crate::health::Live;

/// The conditions of a Cluster API object, by shape.
struct Lists<'a> {
    /// `metav1.Condition`s: `status.conditions` of v1beta2, `status.v1beta2.conditions` of
    /// v1beta1.
    current: Vec<&'a Cond>,
    /// `clusterv1.Condition`s, with a severity: `status.conditions` of v1beta1 and older,
    /// `status.deprecated.v1beta1.conditions` of v1beta2.
    legacy: Vec<&'a Cond>,
}

/// Reads both condition lists of an object.
fn lists(obj: &Live) -> Lists<'_> {
    let top = conditions_in(value(obj, &["status", "conditions"]));
    let v1beta2 = value(obj, &["status", "v1beta2", "conditions"]);
    let deprecated = value(obj, &["status", "deprecated", "v1beta1", "conditions"]);
    if v1beta2.is_some() {
        Lists {
            current: conditions_in(v1beta2),
            legacy: top,
        }
    } else if deprecated.is_some()
        || !(obj.version().starts_with("v1beta1") || obj.version().starts_with("v1alpha"))
    {
        Lists {
            current: top,
            legacy: conditions_in(deprecated),
        }
    } else {
        Lists {
            current: Vec::new(),
            legacy: top,
        }
    }
}

/// A `status` field of v1beta1, or its copy in `status.deprecated.v1beta1` of v1beta2.
fn deprecated_str<'a>(obj: &'a Live, field: &str) -> Option<&'a str> {
    str_at(obj, &["status", field])
        .or_else(|| str_at(obj, &["status", "deprecated", "v1beta1", field]))
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// What every Cluster API kind reads first: a pause (`spec.paused`, the
/// `cluster.x-k8s.io/paused` annotation, a `Paused=True` condition, which every object of a
/// paused Cluster gets) is `Suspended`; no status is `Progressing`; `failureReason` or
/// `failureMessage` (a terminal problem the controllers will not retry), phase `Failed`, or a
/// v1beta1 condition `False` with severity `Error` is `Degraded`, as is a condition `False`
/// whose reason names a failure (`InternalError`, `ReconcileFailed`, `ProbeFailed`, ...);
/// phase `Deleting`/`Deleted`, a `Deleting=True` condition, or the latest spec not observed yet
/// is `Progressing`.
fn common(obj: &Live, lists: &Lists) -> Option<Assessment> {
    if true_at(obj, &["spec", "paused"]) {
        return Some(verdict(Health::Suspended, "spec.paused is true"));
    }
    if annotation(obj, "cluster.x-k8s.io/paused").is_some() {
        return Some(verdict(
            Health::Suspended,
            "the cluster.x-k8s.io/paused annotation is set",
        ));
    }
    if let Some(c) = find(&lists.current, "Paused")
        && state(c) == "True"
    {
        return Some(verdict(Health::Suspended, say(c)));
    }
    status(obj)?;
    let reason = deprecated_str(obj, "failureReason");
    let message = deprecated_str(obj, "failureMessage");
    let failure = match (reason, message) {
        (Some(r), Some(m)) => Some(format!("status.failureReason is {r}: {m}")),
        (Some(r), None) => Some(format!("status.failureReason is {r}")),
        (None, Some(m)) => Some(format!("status.failureMessage is {m}")),
        (None, None) => None,
    };
    if let Some(text) = failure {
        return Some(verdict(Health::Degraded, text));
    }
    let phase = str_at(obj, &["status", "phase"]).unwrap_or_default();
    if phase == "Failed" {
        return Some(verdict(
            Health::Degraded,
            failed_message(lists).unwrap_or_else(|| "status.phase is Failed".into()),
        ));
    }
    if let Some(c) = legacy_failure(lists) {
        return Some(verdict(Health::Degraded, say(c)));
    }
    if let Some(c) = lists
        .current
        .iter()
        .find(|c| state(c) == "False" && terminal_reason(cstr(c, "reason")))
    {
        return Some(verdict(Health::Degraded, say(c)));
    }
    if matches!(phase, "Deleting" | "Deleted") {
        return Some(verdict(
            Health::Progressing,
            format!("status.phase is {phase}"),
        ));
    }
    if let Some(c) = find(&lists.current, "Deleting")
        && state(c) == "True"
    {
        return Some(verdict(Health::Progressing, say(c)));
    }
    generation_lag(obj)
}

/// The v1beta1 condition that says the object failed: the `Ready` summary, else any condition,
/// `False` with severity `Error`, or severity `Warning` and a reason that names a failure
/// (`Warning` is also written while rolling out or scaling).
fn legacy_failure<'a>(lists: &Lists<'a>) -> Option<&'a Cond> {
    let failed = |c: &&Cond| {
        state(c) == "False"
            && match cstr(c, "severity") {
                "Error" => true,
                "Warning" => terminal_reason(cstr(c, "reason")),
                _ => false,
            }
    };
    find(&lists.legacy, "Ready")
        .filter(failed)
        .or_else(|| lists.legacy.iter().copied().find(failed))
}

/// `status.phase is Failed: <the Ready condition>`, when a `Ready` condition says why.
fn failed_message(lists: &Lists) -> Option<String> {
    let c = find(&lists.legacy, "Ready").filter(|c| state(c) == "False")?;
    Some(format!("status.phase is Failed: {}", say(c)))
}

/// The v1beta2 conditions that are `True` while the controller is still acting on the object.
const CAPI_IN_PROGRESS: &[&str] = &[
    "RollingOut",
    "ScalingUp",
    "ScalingDown",
    "Remediating",
    "Updating",
];

/// How one kind reads after [`common`].
struct Summary {
    /// The phases in which the object is up (`Provisioned` for a Cluster, `Running` for the
    /// others); `&[]` for a kind without a phase.
    done: &'static [&'static str],
    /// The v1beta2 summary condition.
    current: &'static str,
    /// The v1beta1 summary conditions, the first found is read.
    legacy: &'static [&'static str],
    /// Whether `status.availableReplicas` (else `readyReplicas`) below `spec.replicas` is still
    /// progressing.
    replicas: bool,
}

/// Reads a kind by its [`Summary`]: a v1beta2 condition of [`CAPI_IN_PROGRESS`] `True` or a
/// phase other than the done ones (`Pending`, `Provisioning`, `Provisioned` of a Machine,
/// `ScalingUp`, `ScalingDown`, `Scaling`, ...) is `Progressing`, phase `Unknown` is `Unknown`;
/// fewer available replicas than desired is `Progressing`; then the summary condition (v1beta2
/// first): `True` is `Healthy`, otherwise `Progressing` (a `False` that named a failure was read
/// by [`common`]); with neither, the done phase is `Healthy`.
fn summary(obj: &Live, lists: &Lists, kind: &Summary) -> Assessment {
    if let Some(c) = CAPI_IN_PROGRESS
        .iter()
        .filter_map(|t| find(&lists.current, t))
        .find(|c| state(c) == "True")
    {
        return verdict(Health::Progressing, say(c));
    }
    let phase = str_at(obj, &["status", "phase"]).filter(|p| !p.is_empty());
    match phase {
        Some("Unknown") => return verdict(Health::Unknown, "status.phase is Unknown"),
        Some(p) if !kind.done.is_empty() && !kind.done.contains(&p) => {
            let why = find(&lists.current, kind.current)
                .or_else(|| kind.legacy.iter().find_map(|t| find(&lists.legacy, t)))
                .filter(|c| state(c) != "True")
                .map(say);
            return verdict(
                Health::Progressing,
                phase_message("status.phase", p, why.as_deref()),
            );
        }
        _ => {}
    }
    if kind.replicas
        && let Some(want) = int_at(obj, &["spec", "replicas"])
        && let Some(have) = available_replicas(obj)
        && have < want
    {
        return verdict(
            Health::Progressing,
            format!("{have} of {want} replicas available"),
        );
    }
    let cond = find(&lists.current, kind.current)
        .or_else(|| kind.legacy.iter().find_map(|t| find(&lists.legacy, t)));
    match (cond, phase) {
        (Some(c), _) if state(c) == "True" => verdict(Health::Healthy, say(c)),
        (Some(c), _) => verdict(Health::Progressing, say(c)),
        (None, Some(p)) => verdict(Health::Healthy, format!("status.phase is {p}")),
        (None, None) if kind.done.is_empty() => {
            verdict(Health::Healthy, format!("no {} condition", kind.current))
        }
        (None, None) => verdict(
            Health::Progressing,
            "waiting for Cluster API to report a phase",
        ),
    }
}

/// `status.availableReplicas`, else `status.readyReplicas`; a count missing beside
/// `status.replicas` is zero (the fields are `omitempty`); `None` when the status counts no
/// replicas.
fn available_replicas(obj: &Live) -> Option<i64> {
    int_at(obj, &["status", "availableReplicas"])
        .or_else(|| int_at(obj, &["status", "readyReplicas"]))
        .or_else(|| {
            value(obj, &["status", "replicas"])
                .is_some_and(Value::is_number)
                .then_some(0)
        })
}

/// Cluster API's kinds. Pauses, failures and deletion as [`common`] reads them; then, by kind:
///
/// - Cluster: phase `Provisioned` and `Available=True` (v1beta2) or `Ready=True` (v1beta1) is
///   `Healthy`; `Pending`, `Provisioning` are `Progressing`;
/// - Machine: phase `Running` and `Available` (v1beta2, `Ready` for `minReadySeconds`) or
///   `Ready` (v1beta1) `True` is `Healthy`; `Pending`, `Provisioning`, `Provisioned` (no Node
///   yet), `Updating` are `Progressing`; a `HealthCheckSucceeded=False` (a MachineHealthCheck
///   found it unhealthy) is `Degraded`;
/// - MachineDeployment, MachineSet, MachinePool: fewer available replicas than `spec.replicas`,
///   or phase `ScalingUp`, `ScalingDown`, `Scaling` (a MachinePool under an external
///   autoscaler), or a v1beta2 `RollingOut`/`ScalingUp`/`ScalingDown`/`Remediating=True` is
///   `Progressing`; phase `Running` (MachineSets have none) with the summary (`Available`, or
///   `MachinesReady` for a MachineSet; v1beta1 `Ready`, `Available`) `True` is `Healthy`;
///   phase `Unknown` is `Unknown`;
/// - MachineHealthCheck: `RemediationAllowed=False` (`TooManyUnhealthy`: more unhealthy
///   machines than `maxUnhealthy` allows, so none is remediated) is `Degraded`;
///   `status.currentHealthy` below `status.expectedMachines` is `Progressing` (the unhealthy
///   machines are being remediated, or are within their `nodeStartupTimeout`); all healthy is
///   `Healthy`;
/// - ClusterResourceSet: `ResourcesApplied=True` is `Healthy`, `False` (`ApplyFailed`,
///   `WrongSecretType`, `NotApplied`, ...) is `Degraded`, none yet is `Progressing`.
///
/// Where this differs from Argo CD's Lua checks: a v1beta1 `Warning` without a failure reason
/// (written while a control plane rolls out or scales) is not `Degraded`; a MachinePool in phase
/// `Scaling` (ready replicas differ from the desired under an autoscaler) is `Progressing`, not
/// `Healthy`; phase `Unknown` is `Unknown` rather than `Degraded`; a MachineHealthCheck with
/// unhealthy targets it may remediate is `Progressing`, not `Degraded` (the MachineHealthCheck
/// is doing its work; the Machines say what is wrong); every kind, not only Cluster and
/// MachineDeployment, reads pauses, and the v1beta2 conditions are read.
///
/// Follows kubernetes-sigs/cluster-api `api/core/v1beta2/cluster_phase_types.go`,
/// `machine_phase_types.go`, `machinedeployment_types.go`, `machineset_types.go`,
/// `machinepool_types.go`, `machinehealthcheck_types.go`, `condition_consts.go`,
/// `v1beta1_condition_consts.go`, `api/core/v1beta1/condition_types.go` (`ConditionSeverity`),
/// `api/addons/v1beta2/clusterresourceset_types.go`, the phases as
/// `core/reconcilers/machine/machine_controller_status.go`,
/// `core/reconcilers/machinedeployment/machinedeployment_status.go` and
/// `core/reconcilers/machinepool/machinepool_controller_phases.go` set them, and
/// `core/reconcilers/machinehealthcheck/machinehealthcheck_controller.go`.
pub(super) fn assess(obj: &Live) -> Option<Assessment> {
    let lists = lists(obj);
    let kind = match obj.kind() {
        "Cluster" => Summary {
            done: &["Provisioned"],
            current: "Available",
            legacy: &["Ready"],
            replicas: false,
        },
        "Machine" => Summary {
            done: &["Running"],
            current: "Available",
            legacy: &["Ready"],
            replicas: false,
        },
        "MachineDeployment" => Summary {
            done: &["Running"],
            current: "Available",
            legacy: &["Ready", "Available"],
            replicas: true,
        },
        "MachineSet" => Summary {
            done: &[],
            current: "MachinesReady",
            legacy: &["Ready", "MachinesReady"],
            replicas: true,
        },
        "MachinePool" => Summary {
            done: &["Running"],
            current: "Available",
            legacy: &["Ready"],
            replicas: true,
        },
        "MachineHealthCheck" => return Some(machine_health_check(obj, &lists)),
        "ClusterResourceSet" => return Some(cluster_resource_set(obj, &lists)),
        _ => return None,
    };
    if let Some(a) = common(obj, &lists) {
        return Some(a);
    }
    if status(obj).is_none() {
        return Some(waiting("Cluster API"));
    }
    if obj.kind() == "Machine"
        && let Some(c) = find(&lists.current, "HealthCheckSucceeded")
            .or_else(|| find(&lists.legacy, "HealthCheckSucceeded"))
        && state(c) == "False"
    {
        return Some(verdict(Health::Degraded, say(c)));
    }
    Some(summary(obj, &lists, &kind))
}

/// MachineHealthCheck (see [`assess`]).
fn machine_health_check(obj: &Live, lists: &Lists) -> Assessment {
    if let Some(a) = common(obj, lists) {
        return a;
    }
    if status(obj).is_none() {
        return waiting("Cluster API");
    }
    let allowed = find(&lists.current, "RemediationAllowed")
        .or_else(|| find(&lists.legacy, "RemediationAllowed"));
    if let Some(c) = allowed
        && state(c) == "False"
    {
        return verdict(Health::Degraded, say(c));
    }
    let expected = int_at(obj, &["status", "expectedMachines"]);
    let healthy = int_at(obj, &["status", "currentHealthy"]);
    match (healthy, expected) {
        (Some(h), Some(e)) if h < e => verdict(
            Health::Progressing,
            format!(
                "{h} of {e} machines healthy (status.currentHealthy of status.expectedMachines): the others are being remediated or starting"
            ),
        ),
        (Some(h), Some(e)) => verdict(Health::Healthy, format!("{h} of {e} machines healthy")),
        _ => verdict(
            Health::Progressing,
            "waiting for Cluster API to count the healthy machines",
        ),
    }
}

/// ClusterResourceSet (see [`assess`]).
fn cluster_resource_set(obj: &Live, lists: &Lists) -> Assessment {
    if let Some(a) = common(obj, lists) {
        return a;
    }
    if status(obj).is_none() {
        return waiting("Cluster API");
    }
    let applied = find(&lists.current, "ResourcesApplied")
        .or_else(|| find(&lists.legacy, "ResourcesApplied"));
    match applied {
        Some(c) if state(c) == "True" => verdict(Health::Healthy, say(c)),
        Some(c) if state(c) == "False" => verdict(Health::Degraded, say(c)),
        Some(c) => verdict(Health::Progressing, say(c)),
        None => verdict(
            Health::Progressing,
            "waiting for Cluster API to set the ResourcesApplied condition",
        ),
    }
}
