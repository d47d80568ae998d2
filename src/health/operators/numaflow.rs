//! Numaflow (`numaflow.numaproj.io`: Pipeline, Vertex, MonoVertex, InterStepBufferService) and
//! Numaplane (`numaplane.numaproj.io`: PipelineRollout, MonoVertexRollout, ISBServiceRollout,
//! NumaflowControllerRollout).

use serde_json::Value;

use super::{
    Assessment, Cond, Health, conditions, cstr, find, generation_lag, label, phase_message, say,
    stale, stale_condition, state, status, str_at, value, verdict, waiting,
};
use crate::health::Live;

/// The label Numaplane puts on a child (Pipeline, MonoVertex, InterStepBufferService) it
/// assessed in a progressive upgrade: `failed`, `succeeded` or `force-promoted`.
const PROGRESSIVE_RESULT: &str = "numaplane.numaproj.io/progressive-result-state";

/// The conditions Numaflow's controllers set `False` only when the spec could not be applied
/// (`MarkNotConfigured`, `MarkDeployFailed`: the phase becomes `Failed` too).
const NUMAFLOW_SETUP: &[&str] = &["Configured", "Deployed"];

/// Numaflow Pipeline, Vertex, MonoVertex and InterStepBufferService: Numaplane's
/// `progressive-result-state: failed` label (a progressive upgrade that assessed this child as
/// failed) and `status.phase` `Failed` are `Degraded` (with `status.reason`/`status.message`),
/// and so is `Configured` or `Deployed` `False`; then the latest spec not observed yet
/// (`status.observedGeneration`) and `Deleting` are `Progressing`; a child-health condition
/// (`DaemonServiceHealthy`, `SideInputsManagersHealthy`, `VerticesHealthy`, `PodsHealthy`,
/// `DaemonHealthy`, `ChildrenResourcesHealthy`) `False` is `Degraded`, unless its reason is
/// `Progressing` (a rollout under way, `CheckDeploymentStatus`/`CheckStatefulSetStatus`) or its
/// message says the child is still being created, which, like `Unknown` (not checked yet), is
/// `Progressing`; `Paused` when `spec.lifecycle.desiredPhase` asks for it is `Suspended` (paused
/// on purpose), `Paused` while the spec asks to run and `Pausing` are `Progressing`; `Running`
/// with every condition `True` is `Healthy`; `Pending` or no phase yet is `Progressing`; no
/// status is `Progressing`.
///
/// Follows numaproj/numaflow `pkg/apis/numaflow/v1alpha1/pipeline_types.go`
/// (`PipelinePhase*`, `PipelineCondition*`, `Lifecycle.DesiredPhase`, `Mark*`),
/// `vertex_types.go` (`VertexPhase*`, `VertexConditionPodsHealthy`), `mono_vertex_types.go`
/// (`MonoVertexPhase*`, `MonoVertexConditionDaemonHealthy`, `MonoVertexPodsHealthy`),
/// `isbsvc_types.go` (`ISBSvcPhase*`, `ISBSvcConditionChildrenResourcesHealthy`),
/// `status_types.go` (`InitializeConditions`: `Unknown`) and `pkg/reconciler/util.go` (the
/// reasons: `Progressing`, `Unavailable`, `ProgressDeadlineExceeded`, `Pod...`); the label from
/// numaproj/numaplane `internal/common/common.go` (`LabelKeyProgressiveResultState`,
/// `LabelValueResultStateFailed`). Numaplane reads these conditions the same way
/// (`getPipelineChildResourceHealth` in `internal/controller/pipelinerollout/pipelinerollout_controller.go`:
/// reason `Progressing` is progressing, any other `False` is a failed child).
///
/// Departs from Argo CD's checks: `Paused` on purpose is `Suspended`, not `Healthy`, and
/// `Pausing` is `Progressing` (the pipeline is draining); a child-health condition `False` with
/// reason `Progressing` is `Progressing`, not `Degraded` (a Deployment rolling out).
pub(super) fn numaflow(obj: &Live) -> Assessment {
    if label(obj, PROGRESSIVE_RESULT) == Some("failed") {
        return verdict(
            Health::Degraded,
            format!("label {PROGRESSIVE_RESULT} is failed: Numaplane's progressive upgrade failed"),
        );
    }
    if status(obj).is_none() {
        return waiting("Numaflow");
    }
    let phase = str_at(obj, &["status", "phase"]).unwrap_or("");
    let message = str_at(obj, &["status", "message"]).filter(|m| !m.trim().is_empty());
    let reason = str_at(obj, &["status", "reason"]).filter(|r| !r.trim().is_empty());
    let why = match (reason, message) {
        (Some(r), Some(m)) => Some(format!("{r}: {m}")),
        (r, m) => r.or(m).map(str::to_string),
    };
    if phase == "Failed" {
        return verdict(
            Health::Degraded,
            phase_message("status.phase", phase, why.as_deref()),
        );
    }
    let conds = conditions(obj);
    if let Some(c) = conds
        .iter()
        .find(|c| NUMAFLOW_SETUP.contains(&cstr(c, "type")) && state(c) == "False")
    {
        return verdict(Health::Degraded, say(c));
    }
    if let Some(a) = generation_lag(obj) {
        return a;
    }
    if phase == "Deleting" {
        return verdict(
            Health::Progressing,
            phase_message("status.phase", phase, None),
        );
    }
    let mut not_yet = None;
    for c in &conds {
        match state(c) {
            "True" => {}
            "False" if !still_coming(c) => return verdict(Health::Degraded, say(c)),
            _ => {
                not_yet.get_or_insert_with(|| verdict(Health::Progressing, say(c)));
            }
        }
    }
    let desired = str_at(obj, &["spec", "lifecycle", "desiredPhase"]).unwrap_or("Running");
    match phase {
        "Paused" if desired == "Paused" => verdict(
            Health::Suspended,
            "status.phase is Paused: spec.lifecycle.desiredPhase is Paused",
        ),
        "Paused" => verdict(
            Health::Progressing,
            format!("status.phase is Paused, spec.lifecycle.desiredPhase is {desired}: resuming"),
        ),
        "Pausing" => verdict(
            Health::Progressing,
            phase_message("status.phase", phase, message),
        ),
        _ if not_yet.is_some() => not_yet.unwrap_or_else(|| waiting("Numaflow")),
        "Running" => verdict(Health::Healthy, phase_message("status.phase", phase, None)),
        "" => verdict(
            Health::Progressing,
            "waiting for Numaflow to set status.phase",
        ),
        "Pending" => verdict(
            Health::Progressing,
            phase_message("status.phase", phase, message),
        ),
        other => verdict(
            Health::Unknown,
            phase_message("status.phase", other, message),
        ),
    }
}

/// Whether a child-health condition that is `False` says the child is on its way rather than
/// failed: reason `Progressing`, or the controller's "not found, might be still under
/// creation" (`GetDaemonServiceFailed`, `GetStatefulSetFailed`).
fn still_coming(c: &Cond) -> bool {
    cstr(c, "reason") == "Progressing" || cstr(c, "message").contains("still under creation")
}

/// The reasons of Numaplane's `ChildResourcesHealthy=False` that are not failures: the child is
/// rolling out, pending, or being deleted.
const NUMAPLANE_CHILD_ON_ITS_WAY: &[&str] = &["Progressing", "ISBSvcPending", "PipelineDeleting"];

/// Numaplane PipelineRollout, MonoVertexRollout, ISBServiceRollout and
/// NumaflowControllerRollout: `status.phase` `Failed` (with `status.message`) and
/// `ProgressiveUpgradeSucceeded=False` are `Degraded`; so is `ChildResourcesHealthy=False` of
/// the current generation whose reason names a failed child (`PipelineFailed`,
/// `MonoVertexFailed`, `ISBSvcFailed`, `Failed`, `Unhealthy`, a Deployment's `Degraded`), while
/// `Progressing`, `ISBSvcPending` and `PipelineDeleting` are `Progressing`; then the latest spec
/// not observed yet (`status.observedGeneration`), `status.phase` `Pending` and an upgrade
/// under way (`status.upgradeInProgress`: `DirectApply`, `PipelinePauseAndDrain`,
/// `Progressive`) are `Progressing`; `PipelinePausingOrPaused`/`MonoVertexPausingOrPaused`
/// `True` is `Suspended` when the child is `Paused` as the rollout's spec asks
/// (`spec.pipeline.spec.lifecycle.desiredPhase`, `spec.monoVertex.spec.lifecycle.desiredPhase`),
/// `Progressing` otherwise (pausing, or paused by Numaplane for an update); `PausingPipelines`
/// `True` (an ISB service or controller update pausing the pipelines) is `Progressing`;
/// `ChildResourcesHealthy=True` is `Healthy`; `Unknown` or none yet is `Progressing`; no status
/// is `Progressing`.
///
/// Follows numaproj/numaplane `pkg/apis/numaplane/v1alpha1/status_types.go` (`Phase*`,
/// `ConditionChildResourceHealthy`, `ConditionPausingPipelines`,
/// `ConditionProgressiveUpgradeSucceeded`, `ProgressingReasonString`),
/// `shared_types.go` (`UpgradeStrategy*`), `pipelinerollout_types.go`
/// (`ConditionPipelinePausingOrPaused`), `monovertexrollout_types.go`
/// (`ConditionMonoVertexPausingOrPaused`) and the reasons each controller writes
/// (`internal/controller/pipelinerollout/pipelinerollout_controller.go`
/// `setChildResourcesHealthCondition`, `monovertexrollout_controller.go`
/// `processMonoVertexStatus`, `isbservicerollout_controller.go`,
/// `numaflowcontrollerrollout_controller.go` `processNumaflowControllerStatus`).
///
/// Departs from Argo CD's checks: a rollout whose child is paused on purpose is `Suspended`,
/// not `Healthy`.
pub(super) fn numaplane(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return waiting("Numaplane");
    }
    let phase = str_at(obj, &["status", "phase"]).unwrap_or("");
    let message = str_at(obj, &["status", "message"]);
    if phase == "Failed" {
        return verdict(
            Health::Degraded,
            phase_message("status.phase", phase, message),
        );
    }
    let conds = conditions(obj);
    if let Some(c) = find(&conds, "ProgressiveUpgradeSucceeded")
        && state(c) == "False"
    {
        return verdict(Health::Degraded, say(c));
    }
    let child = find(&conds, "ChildResourcesHealthy");
    if let Some(c) = child
        && state(c) == "False"
        && !stale(obj, c)
        && !NUMAPLANE_CHILD_ON_ITS_WAY.contains(&cstr(c, "reason"))
    {
        return verdict(Health::Degraded, say(c));
    }
    if let Some(a) = generation_lag(obj) {
        return a;
    }
    if phase == "Pending" {
        return verdict(
            Health::Progressing,
            phase_message("status.phase", phase, message),
        );
    }
    if let Some(u) = str_at(obj, &["status", "upgradeInProgress"]).filter(|u| !u.is_empty()) {
        return verdict(
            Health::Progressing,
            format!("status.upgradeInProgress is {u}"),
        );
    }
    let (paused_type, desired_at) = match obj.kind() {
        "PipelineRollout" => (
            "PipelinePausingOrPaused",
            ["spec", "pipeline", "spec", "lifecycle", "desiredPhase"],
        ),
        "MonoVertexRollout" => (
            "MonoVertexPausingOrPaused",
            ["spec", "monoVertex", "spec", "lifecycle", "desiredPhase"],
        ),
        _ => ("PausingPipelines", [""; 5]),
    };
    if let Some(c) = find(&conds, paused_type)
        && state(c) == "True"
    {
        let desired = value(obj, &desired_at).and_then(Value::as_str);
        return if desired == Some("Paused") && cstr(c, "reason").ends_with("Paused") {
            verdict(
                Health::Suspended,
                format!("{} ({} is Paused)", say(c), desired_at.join(".")),
            )
        } else {
            verdict(Health::Progressing, say(c))
        };
    }
    match child {
        Some(c) if stale(obj, c) => stale_condition(obj, c),
        Some(c) if state(c) == "True" => verdict(Health::Healthy, say(c)),
        Some(c) => verdict(Health::Progressing, say(c)),
        None => verdict(
            Health::Progressing,
            "waiting for Numaplane to set the ChildResourcesHealthy condition",
        ),
    }
}
