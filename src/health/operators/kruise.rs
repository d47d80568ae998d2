//! OpenKruise's workloads and jobs (`apps.kruise.io`), Kruise Rollout (`rollouts.kruise.io`) and
//! OpenKruiseGame (`game.kruise.io`), each read from the project's own API types and controllers
//! (the doc comment of every rule names the files).
//!
//! The three workloads share one reading ([`workload`]): Kruise writes the counters of
//! Deployment, StatefulSet and DaemonSet, plus a rollout that a `partition` or `paused` holds
//! back on purpose (Kruise Rollout drives its canary batches through that partition).

use serde_json::Value;

use super::{
    Cond, conditions, cstr, find, generation_lag, has, int_at, phase_message, say, state, status,
    str_at, true_at, value, verdict, waiting,
};
use crate::health::Live;
use crate::health::{Assessment, Health};

/// Who writes the status of the `apps.kruise.io` kinds, for messages.
const KRUISE: &str = "OpenKruise";

// ---------------------------------------------------------------------------------------------
// Reading.

/// The number at a path, 0 when absent (the counters Kruise writes without `omitempty`).
fn count(obj: &Live, path: &[&str]) -> i64 {
    int_at(obj, path).unwrap_or(0)
}

/// An int-or-percent (`2`, `"2"`, `"20%"`) as a number of pods out of `total`, rounded up or
/// down as k8s.io/apimachinery's `intstr.GetScaledValueFromIntOrPercent` does.
fn scaled(v: &Value, total: i64, round_up: bool) -> Option<i64> {
    if let Some(p) = v.as_str().and_then(|s| s.trim().strip_suffix('%')) {
        let p: i64 = p.trim().parse().ok()?;
        let n = p * total;
        return Some(if round_up {
            (n + 99).div_euclid(100)
        } else {
            n.div_euclid(100)
        });
    }
    super::number(v)
}

/// `spec.updateStrategy.rollingUpdate.partition` (the Advanced StatefulSet and GameServerSet
/// field), 0 when absent, held between 0 and `want`.
fn rolling_partition(obj: &Live, want: i64) -> i64 {
    int_at(
        obj,
        &["spec", "updateStrategy", "rollingUpdate", "partition"],
    )
    .unwrap_or(0)
    .clamp(0, want.max(0))
}

/// The first of these paths that holds a value (a field that moved between API versions).
fn first<'a>(obj: &'a Live, paths: &[&[&str]]) -> Option<&'a Value> {
    paths.iter().find_map(|p| value(obj, p))
}

/// How a Kruise workload's rollout stands, read from its spec and status.
struct Rollout {
    /// `CloneSet`, `StatefulSet`, ..., for messages.
    what: &'static str,
    /// `pods` or `daemon pods`, for messages.
    pods: &'static str,
    /// Pods wanted: `spec.replicas`, or the nodes that should run a daemon pod.
    want: i64,
    /// Pods the partition keeps at the old revision.
    partition: i64,
    /// The field the partition was read from, for messages.
    partition_field: &'static str,
    /// `updateStrategy.type` is `OnDelete`: pods are replaced only when deleted.
    on_delete: bool,
    /// Pods there (`status.replicas`); `None` when the kind does not count them.
    total: Option<i64>,
    /// Pods at the update revision.
    updated: i64,
    /// Pods at the update revision and available; `None` when the kind does not count them.
    updated_available: Option<i64>,
    /// Pods available.
    available: i64,
    /// Pods of an older revision are still there.
    held: bool,
    /// The revision the pods are updated to, for messages.
    revision: Option<String>,
}

/// The verdict of a workload's counters, after its paused, generation and failure readings:
/// fewer pods updated than the partition lets through, fewer of them available, old pods
/// still to go (`status.replicas` above the wanted count), or fewer pods available than
/// wanted are `Progressing`; a partition holding pods of an older revision back once the
/// updated ones are available is `Suspended` (Kruise's CloneSet controller says of it
/// `ProgressPartitionAvailable`, "paused due to partition ready": the rollout waits for a
/// person, or Kruise Rollout's next batch, to lower the partition); otherwise `Healthy`.
/// With `updateStrategy.type: OnDelete` only the counts of pods are read (updates wait for
/// pods to be deleted, as Kubernetes' StatefulSet rule reads it).
fn workload(r: &Rollout) -> Assessment {
    let (what, pods, want) = (r.what, r.pods, r.want);
    let expected = (want - r.partition).max(0);
    let at = r
        .revision
        .as_deref()
        .filter(|s| !s.is_empty())
        .map(|s| format!(" at revision {s}"))
        .unwrap_or_default();
    if !r.on_delete {
        if r.updated < expected {
            let kept = if r.partition > 0 {
                format!(
                    " ({} {} keeps {} at the old revision)",
                    r.partition_field, r.partition, r.partition
                )
            } else {
                String::new()
            };
            return verdict(
                Health::Progressing,
                format!(
                    "waiting for {what} rollout to finish: {} of {expected} {pods} updated{at}{kept}",
                    r.updated
                ),
            );
        }
        if let Some(ua) = r.updated_available
            && ua < expected
        {
            return verdict(
                Health::Progressing,
                format!(
                    "waiting for {what} rollout to finish: {ua} of {expected} updated {pods} available"
                ),
            );
        }
    }
    if let Some(total) = r.total
        && total > want
    {
        return verdict(
            Health::Progressing,
            format!(
                "waiting for {what} rollout to finish: {} old {pods} pending termination ({total} there, {want} wanted)",
                total - want
            ),
        );
    }
    if r.available < want {
        return verdict(
            Health::Progressing,
            format!(
                "waiting for {what} rollout to finish: {} of {want} {pods} available",
                r.available
            ),
        );
    }
    if r.on_delete {
        return verdict(
            Health::Healthy,
            format!(
                "{} of {want} {pods} available, {} updated (updateStrategy OnDelete: pods are replaced when deleted)",
                r.available, r.updated
            ),
        );
    }
    if r.partition > 0 && r.held {
        return verdict(
            Health::Suspended,
            format!(
                "{} {} holds {} {pods} at the old revision: {} of {want} updated{at} and available; lower the partition to go on",
                r.partition_field,
                r.partition,
                (want - r.updated).max(0),
                r.updated
            ),
        );
    }
    verdict(
        Health::Healthy,
        format!("{} of {want} {pods} updated{at} and available", r.updated),
    )
}

/// A paused rollout: `Suspended`, naming the field.
fn paused(field: &str) -> Assessment {
    verdict(
        Health::Suspended,
        format!("{field} is true: the rollout is paused"),
    )
}

/// `status.observedGeneration` behind `metadata.generation`, or not written yet (0, as
/// `kubectl rollout status` reads a StatefulSet): `Progressing`.
fn not_observed(obj: &Live, what: &str) -> Option<Assessment> {
    if int_at(obj, &["status", "observedGeneration"]).unwrap_or(0) == 0 {
        return Some(verdict(
            Health::Progressing,
            format!("waiting for {what} spec update to be observed (no status.observedGeneration)"),
        ));
    }
    generation_lag(obj)
}

/// `updateStrategy.type` is `OnDelete`.
fn on_delete(obj: &Live) -> bool {
    str_at(obj, &["spec", "updateStrategy", "type"]) == Some("OnDelete")
}

/// `status.updateRevision` differs from `status.currentRevision` (pods of the older revision
/// remain); `None` when either is missing.
fn revisions_differ(obj: &Live) -> Option<bool> {
    let update = str_at(obj, &["status", "updateRevision"]).filter(|s| !s.is_empty())?;
    let current = str_at(obj, &["status", "currentRevision"]).filter(|s| !s.is_empty())?;
    Some(update != current)
}

/// Updated and available pods: `status.updatedAvailableReplicas` (Kruise v1.5+, left out when
/// 0), else `status.updatedReadyReplicas`.
fn updated_available(obj: &Live) -> i64 {
    int_at(obj, &["status", "updatedAvailableReplicas"])
        .or_else(|| int_at(obj, &["status", "updatedReadyReplicas"]))
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// apps.kruise.io workloads.

/// OpenKruise CloneSet: `spec.updateStrategy.paused` (v1alpha1) or
/// `spec.updateStrategy.rollingUpdate.paused` (v1beta1) is `Suspended`; no status, or the
/// latest spec not observed, is `Progressing`; the `Progressing` condition `False` with
/// `ProgressDeadlineExceeded` (set when `spec.progressDeadlineSeconds` is) is `Degraded`; then
/// the counters ([`workload`]): `spec.replicas` (default 1) less the partition (an
/// int-or-percent rounded up, and below 100% leaving at least one pod to update, as
/// `util.CalculatePartitionReplicas` does) against `updatedReplicas` and
/// `updatedAvailableReplicas`, `replicas` and `availableReplicas`; a partition holding pods of
/// an older revision (`updateRevision` not `currentRevision`) is `Suspended`.
///
/// The `FailedScale` and `FailedUpdate` conditions are named in the message but do not decide:
/// the controller sets them `True` when creating, deleting or updating a pod fails and never
/// clears them (`syncCloneSet` only ever writes `True`, and the status carries the old
/// conditions over), so they tell a past failure from a present one no better than the
/// counters do; a rollout stuck on one is `Degraded` once its progress deadline passes.
///
/// Follows openkruise/kruise `apis/apps/v1alpha1/cloneset_types.go` and
/// `apis/apps/v1beta1/cloneset_types.go` (`CloneSetStatus`, `CloneSetConditionFailedScale`,
/// `CloneSetProgressDeadlineExceeded`, `CloneSetProgressPartitionAvailable`),
/// `pkg/controller/cloneset/cloneset_status.go` (`calculateProgressingStatus`),
/// `pkg/controller/cloneset/cloneset_controller.go` (`syncCloneSet`), `pkg/util/tools.go`
/// (`CalculatePartitionReplicas`) and openkruise/kruise-tools
/// `pkg/internal/polymorphichelpers/rollout_status.go` (`CloneSetStatusViewer`).
///
/// Differs from Argo CD's check, which reads all replicas updated but not available as
/// `Degraded`, a missing `updatedAvailableReplicas` as paused, and a partition as `Suspended`
/// as soon as enough pods are updated: a rollout in flight is `Progressing` here, as
/// `kubectl-kruise rollout status` waits on it, and a partition holds the rollout once the
/// updated pods are available, as the controller's `ProgressPartitionAvailable` says.
pub(super) fn cloneset(obj: &Live) -> Assessment {
    if true_at(obj, &["spec", "updateStrategy", "rollingUpdate", "paused"]) {
        return paused("spec.updateStrategy.rollingUpdate.paused");
    }
    if true_at(obj, &["spec", "updateStrategy", "paused"]) {
        return paused("spec.updateStrategy.paused");
    }
    if status(obj).is_none() {
        return waiting(KRUISE);
    }
    if let Some(a) = not_observed(obj, "CloneSet") {
        return a;
    }
    let conds = conditions(obj);
    if let Some(c) = find(&conds, "Progressing")
        && state(c) == "False"
        && cstr(c, "reason") == "ProgressDeadlineExceeded"
    {
        return verdict(Health::Degraded, say(c));
    }
    let want = int_at(obj, &["spec", "replicas"]).unwrap_or(1);
    let (field, partition) = match first(
        obj,
        &[
            &["spec", "updateStrategy", "rollingUpdate", "partition"],
            &["spec", "updateStrategy", "partition"],
        ],
    ) {
        Some(v) => {
            let field = if value(
                obj,
                &["spec", "updateStrategy", "rollingUpdate", "partition"],
            )
            .is_some()
            {
                "spec.updateStrategy.rollingUpdate.partition"
            } else {
                "spec.updateStrategy.partition"
            };
            let mut p = scaled(v, want, true).unwrap_or(0);
            if want > 1 && p == want && v.as_str().is_some_and(|s| s.trim() != "100%") {
                p = want - 1;
            }
            (field, p.clamp(0, want.max(0)))
        }
        None => ("spec.updateStrategy.partition", 0),
    };
    let updated = count(obj, &["status", "updatedReplicas"]);
    let mut a = workload(&Rollout {
        what: "CloneSet",
        pods: "pods",
        want,
        partition,
        partition_field: field,
        on_delete: on_delete(obj),
        total: Some(count(obj, &["status", "replicas"])),
        updated,
        updated_available: Some(updated_available(obj)),
        available: count(obj, &["status", "availableReplicas"]),
        held: revisions_differ(obj).unwrap_or(updated < want),
        revision: str_at(obj, &["status", "updateRevision"]).map(str::to_string),
    });
    for t in ["FailedScale", "FailedUpdate"] {
        if let Some(c) = find(&conds, t)
            && state(c) == "True"
        {
            let at = cstr(c, "lastTransitionTime");
            let at = if at.is_empty() {
                String::new()
            } else {
                format!("set at {at}; ")
            };
            a.message = format!(
                "{}; {} ({at}the controller never clears it)",
                a.message,
                say(c)
            );
        }
    }
    a
}

/// OpenKruise Advanced StatefulSet (`apps.kruise.io` StatefulSet):
/// `spec.updateStrategy.rollingUpdate.paused` is `Suspended`; no status, or the latest spec
/// not observed, is `Progressing`; a `FailedCreatePod` or `FailedUpdatePod` condition `True` is
/// `Degraded` (the controller builds the status afresh on every reconcile, so the condition
/// is the last attempt's); then the counters ([`workload`]): `spec.replicas` (default 1) less
/// `rollingUpdate.partition` against `updatedReplicas`, `updatedAvailableReplicas`,
/// `replicas` and `availableReplicas`; a partition holding pods of an older revision
/// (`updateRevision` not `currentRevision`) is `Suspended`; `updateStrategy.type: OnDelete`
/// reads only the counts of pods.
///
/// Follows openkruise/kruise `apis/apps/v1beta1/statefulset_types.go`
/// (`RollingUpdateStatefulSetStrategy`, `StatefulSetStatus`, `FailedCreatePod`,
/// `FailedUpdatePod`), `pkg/controller/statefulset/stateful_set_control.go`
/// (`updateStatefulSet`: a fresh `StatefulSetStatus`, `NewStatefulsetCondition`) and
/// openkruise/kruise-tools `pkg/internal/polymorphichelpers/rollout_status.go`
/// (`AdvancedStatefulSetStatusViewer`).
///
/// Differs from Argo CD's check, which reads all replicas not yet available as `Degraded`: a
/// rollout in flight is `Progressing` here, as `kubectl-kruise rollout status` waits on it.
pub(super) fn statefulset(obj: &Live) -> Assessment {
    if true_at(obj, &["spec", "updateStrategy", "rollingUpdate", "paused"]) {
        return paused("spec.updateStrategy.rollingUpdate.paused");
    }
    if status(obj).is_none() {
        return waiting(KRUISE);
    }
    if let Some(a) = not_observed(obj, "Advanced StatefulSet") {
        return a;
    }
    let conds = conditions(obj);
    for t in ["FailedCreatePod", "FailedUpdatePod"] {
        if let Some(c) = find(&conds, t)
            && state(c) == "True"
        {
            return verdict(Health::Degraded, say(c));
        }
    }
    let want = int_at(obj, &["spec", "replicas"]).unwrap_or(1);
    let partition = rolling_partition(obj, want);
    let updated = count(obj, &["status", "updatedReplicas"]);
    workload(&Rollout {
        what: "Advanced StatefulSet",
        pods: "pods",
        want,
        partition,
        partition_field: "spec.updateStrategy.rollingUpdate.partition",
        on_delete: on_delete(obj),
        total: Some(count(obj, &["status", "replicas"])),
        updated,
        updated_available: Some(updated_available(obj)),
        available: count(obj, &["status", "availableReplicas"]),
        held: revisions_differ(obj).unwrap_or(updated < want),
        revision: str_at(obj, &["status", "updateRevision"]).map(str::to_string),
    })
}

/// OpenKruise Advanced DaemonSet (`apps.kruise.io` DaemonSet):
/// `spec.updateStrategy.rollingUpdate.paused` is `Suspended`; no status, or the latest spec
/// not observed, is `Progressing`; then the counters ([`workload`]):
/// `status.desiredNumberScheduled` less `rollingUpdate.partition` (an int-or-percent of it,
/// rounded down as the controller does) against `updatedNumberScheduled`, and
/// `numberAvailable` against `desiredNumberScheduled`; a partition holding daemon pods of an
/// older revision (fewer updated than desired) is `Suspended`; `updateStrategy.type: OnDelete`
/// reads only the count of available pods.
///
/// Follows openkruise/kruise `apis/apps/v1beta1/daemonset_types.go` (`RollingUpdateDaemonSet`:
/// `partition`, "the number of DaemonSet pods remained to be old version"; `paused`;
/// `DaemonSetStatus`), `pkg/controller/daemonset/daemonset_update.go` (the partition scaled
/// with `GetScaledValueFromIntOrPercent(..., false)`) and Kubernetes' `kubectl rollout status`
/// for a DaemonSet (k8s.io/kubectl `pkg/polymorphichelpers/rollout_status.go`).
///
/// Differs from Argo CD's check, which reads every daemon pod updated but unavailable as
/// `Degraded` and no node to run on as `Progressing`: pods still becoming available are
/// `Progressing`, and no node to run on is `Healthy`, as Kubernetes' DaemonSet rule reads them.
pub(super) fn daemonset(obj: &Live) -> Assessment {
    if true_at(obj, &["spec", "updateStrategy", "rollingUpdate", "paused"]) {
        return paused("spec.updateStrategy.rollingUpdate.paused");
    }
    if status(obj).is_none() {
        return waiting(KRUISE);
    }
    if let Some(a) = generation_lag(obj) {
        return a;
    }
    let want = count(obj, &["status", "desiredNumberScheduled"]);
    let partition = value(
        obj,
        &["spec", "updateStrategy", "rollingUpdate", "partition"],
    )
    .and_then(|v| scaled(v, want, false))
    .unwrap_or(0)
    .clamp(0, want.max(0));
    let updated = count(obj, &["status", "updatedNumberScheduled"]);
    workload(&Rollout {
        what: "Advanced DaemonSet",
        pods: "daemon pods",
        want,
        partition,
        partition_field: "spec.updateStrategy.rollingUpdate.partition",
        on_delete: on_delete(obj),
        total: None,
        updated,
        updated_available: None,
        available: count(obj, &["status", "numberAvailable"]),
        held: updated < want,
        revision: str_at(obj, &["status", "updateRevision"])
            .or_else(|| str_at(obj, &["status", "daemonSetHash"]))
            .map(str::to_string),
    })
}

// ---------------------------------------------------------------------------------------------
// apps.kruise.io jobs.

/// Whether an AdvancedCronJob's finished runs are deleted, so that no child job may be left to
/// date the last run: `spec.successfulJobsHistoryLimit` 0, or a `ttlSecondsAfterFinished` in
/// the job template (a Job's `spec`, a BroadcastJob's or ImageListPullJob's
/// `spec.completionPolicy`).
fn runs_leave_no_trace(obj: &Live) -> bool {
    int_at(obj, &["spec", "successfulJobsHistoryLimit"]) == Some(0)
        || [
            &[
                "spec",
                "template",
                "jobTemplate",
                "spec",
                "ttlSecondsAfterFinished",
            ][..],
            &[
                "spec",
                "template",
                "broadcastJobTemplate",
                "spec",
                "completionPolicy",
                "ttlSecondsAfterFinished",
            ],
            &[
                "spec",
                "template",
                "imageListPullJobTemplate",
                "spec",
                "completionPolicy",
                "ttlSecondsAfterFinished",
            ],
        ]
        .iter()
        .any(|p| value(obj, p).is_some())
}

/// OpenKruise AdvancedCronJob: `spec.paused` is `Suspended`; no status is `Progressing`; a last
/// schedule (`status.lastScheduleTime`) or jobs running (`status.active`) is `Healthy`, with
/// both in the message; neither is `Progressing` (waiting for the first run). When finished
/// runs are deleted ([`runs_leave_no_trace`]) an empty `lastScheduleTime` may also mean runs
/// that left no trace: the status cannot tell the two apart, so it stays `Progressing` (never
/// `Healthy` on no evidence) and the message says why. Its status says nothing of how a run
/// ended (no `lastSuccessfulTime`, no conditions): each run's health is its own Job's,
/// BroadcastJob's or ImageListPullJob's.
///
/// Follows openkruise/kruise `apis/apps/v1beta1/advancedcronjob_types.go`
/// (`AdvancedCronJobStatus`: `type`, `active`, `lastScheduleTime`; `Paused`,
/// `SuccessfulJobsHistoryLimit`) and
/// `pkg/controller/advancedcronjob/advancedcronjob_job_controller.go` (`reconcileJob`:
/// `lastScheduleTime` is the newest scheduled time among the child jobs still there, `nil`
/// when there are none).
///
/// Differs from Argo CD's check, which reads jobs running as `Progressing` and no
/// `lastScheduleTime` as `Degraded`: a schedule running its job works as declared (as
/// Kubernetes' CronJob rule reads it), and no `lastScheduleTime` means no run yet (or the runs
/// deleted), not a failure, so it is `Progressing`.
pub(super) fn advanced_cronjob(obj: &Live) -> Assessment {
    if true_at(obj, &["spec", "paused"]) {
        return verdict(
            Health::Suspended,
            "spec.paused is true: no job is scheduled",
        );
    }
    if status(obj).is_none() {
        return waiting(KRUISE);
    }
    let active: Vec<&str> = value(obj, &["status", "active"])
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|r| r.get("name").and_then(Value::as_str).unwrap_or("?"))
                .collect()
        })
        .unwrap_or_default();
    let last = str_at(obj, &["status", "lastScheduleTime"]).filter(|s| !s.is_empty());
    match (active.as_slice(), last) {
        ([], Some(t)) => verdict(
            Health::Healthy,
            format!("last scheduled at {t}, no job running"),
        ),
        ([], None) if runs_leave_no_trace(obj) => verdict(
            Health::Progressing,
            "no run on record (no status.lastScheduleTime): either none has run yet or its \
             finished jobs were deleted, which the status cannot tell apart",
        ),
        ([], None) => verdict(
            Health::Progressing,
            "waiting for the first scheduled run (no status.lastScheduleTime)",
        ),
        (jobs, Some(t)) => verdict(
            Health::Healthy,
            format!("last scheduled at {t}, running: {}", jobs.join(", ")),
        ),
        (jobs, None) => verdict(Health::Healthy, format!("running: {}", jobs.join(", "))),
    }
}

/// OpenKruise BroadcastJob: a `Failed` condition `True` or `status.phase` `failed` (the
/// `FailFast` failure policy met a failed pod, or `activeDeadlineSeconds` passed) is
/// `Degraded`; `completed` is `Healthy`, but `Degraded` when pods failed (`status.failed`: the
/// job completes on all nodes "regardless succeeded or failed" under the `Continue` policy);
/// `paused` is `Suspended` when `spec.paused` is true, `Degraded` when pods failed (the `Pause`
/// failure policy stopped it); `running` is `Progressing`, but for a job kept alive for new
/// nodes (`completionPolicy.type: Never`) whose pods have all finished: `Healthy`, or
/// `Degraded` when some failed; `spec.paused` is `Suspended`; no status is `Progressing`.
///
/// Follows openkruise/kruise `apis/apps/v1beta1/broadcastjob_types.go` (`BroadcastJobPhase`:
/// `completed`, `running`, `paused`, `failed`; `JobComplete`, `JobFailed`; `CompletionPolicy`;
/// `FailurePolicy`) and `pkg/controller/broadcastjob/broadcastjob_controller.go` (`Reconcile`,
/// `isJobComplete`, `isJobFailed`).
pub(super) fn broadcast_job(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return waiting(KRUISE);
    }
    let conds = conditions(obj);
    let (desired, active, succeeded, failed) = (
        count(obj, &["status", "desired"]),
        count(obj, &["status", "active"]),
        count(obj, &["status", "succeeded"]),
        count(obj, &["status", "failed"]),
    );
    let counts = format!(
        "{succeeded} succeeded, {failed} failed, {active} active of {desired} desired pods"
    );
    let phase = str_at(obj, &["status", "phase"]).unwrap_or("");
    if let Some(c) = find(&conds, "Failed")
        && state(c) == "True"
    {
        return verdict(Health::Degraded, format!("{} ({counts})", say(c)));
    }
    if phase == "failed" {
        return verdict(
            Health::Degraded,
            format!("status.phase is failed ({counts})"),
        );
    }
    let spec_paused = true_at(obj, &["spec", "paused"]);
    let completed = phase == "completed" || (phase.is_empty() && has(&conds, "Complete", "True"));
    match phase {
        _ if completed && failed > 0 => verdict(
            Health::Degraded,
            format!("completed with failed pods ({counts})"),
        ),
        _ if completed => verdict(Health::Healthy, format!("completed ({counts})")),
        "paused" if !spec_paused && failed > 0 => verdict(
            Health::Degraded,
            format!("status.phase is paused: pods failed under failurePolicy Pause ({counts})"),
        ),
        "paused" => verdict(
            Health::Suspended,
            format!("status.phase is paused ({counts})"),
        ),
        _ if spec_paused => verdict(Health::Suspended, format!("spec.paused is true ({counts})")),
        "running" | "" => {
            let keep_alive = str_at(obj, &["spec", "completionPolicy", "type"]) == Some("Never");
            if keep_alive && desired > 0 && active == 0 && succeeded + failed >= desired {
                let health = if failed > 0 {
                    Health::Degraded
                } else {
                    Health::Healthy
                };
                return verdict(
                    health,
                    format!("every pod finished, kept alive for new nodes ({counts})"),
                );
            }
            verdict(
                Health::Progressing,
                format!(
                    "status.phase is {} ({counts})",
                    if phase.is_empty() { "not set" } else { phase }
                ),
            )
        }
        p => verdict(Health::Unknown, format!("status.phase is {p} ({counts})")),
    }
}

// ---------------------------------------------------------------------------------------------
// rollouts.kruise.io.

/// The step a Kruise Rollout is on (1-based), from `status.currentStepIndex` or the strategy's
/// own status.
fn rollout_step(obj: &Live) -> Option<i64> {
    first(
        obj,
        &[
            &["status", "canaryStatus", "currentStepIndex"],
            &["status", "blueGreenStatus", "currentStepIndex"],
            &["status", "currentStepIndex"],
        ],
    )
    .and_then(super::number)
}

/// The state of the step a Kruise Rollout is on.
fn rollout_step_state(obj: &Live) -> &str {
    first(
        obj,
        &[
            &["status", "canaryStatus", "currentStepState"],
            &["status", "blueGreenStatus", "currentStepState"],
            &["status", "currentStepState"],
        ],
    )
    .and_then(Value::as_str)
    .unwrap_or("")
}

/// Kruise Rollout Rollout: no status is `Progressing`; `status.phase` `Terminating`
/// (finalising before deletion) and `Disabling` are `Progressing`; the latest spec not observed
/// is `Progressing`; then the phase: `Healthy` is `Healthy` (no release under way; a release
/// cancelled because the workload was rolled back leaves `Succeeded=False` and is said in the
/// message); `Disabled` (`spec.disabled`) is `Suspended`; `Initial` is `Progressing` (the
/// controller has not found the workload yet); `Progressing` is `Suspended` when paused
/// (`spec.strategy.paused`, the `Progressing` condition's reason `Paused`) or when the step it
/// is on (`currentStepState` `StepPaused`) waits for a person to approve the next step (the
/// controller's `status.message` says "you need manually confirm", which it writes when the
/// step has no `pause.duration`; without that message, the step's `pause.duration` in the spec
/// is read), `Degraded` when the controller refuses to go on ("please rollback
/// first": a new version released in the middle of a blue-green release), `Progressing`
/// otherwise (a step upgrading, a timed pause, finalising, cancelling).
///
/// Follows openkruise/rollouts `api/v1beta1/rollout_types.go` (`RolloutPhase`,
/// `RolloutConditionProgressing` and its reasons, `RolloutConditionSucceeded`,
/// `CanaryStepState`, `RolloutPause`), `pkg/controller/rollout/rollout_status.go`
/// (`calculateRolloutStatus`), `pkg/controller/rollout/rollout_progressing.go`
/// (`reconcileRolloutProgressing`, `handleContinuousRelease`, `setRolloutSucceededCondition`)
/// and `pkg/controller/rollout/rollout_canary.go` (`doCanaryPaused`: "you need manually confirm
/// to enter the next step").
///
/// Differs from Argo CD's check, which reads `Disabled` and `Terminating` as `Degraded` and
/// `Healthy` only with the last step `Completed`: a Rollout its owner disabled is `Suspended`,
/// one being deleted `Progressing`, and a release cancelled by rolling the workload back
/// (`Succeeded=False`, written only by the cancelling path) leaves the stable version running,
/// as the controller's own phase `Healthy` says.
pub(super) fn kruise_rollout(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return waiting("Kruise Rollout");
    }
    let message = str_at(obj, &["status", "message"]);
    let phase = str_at(obj, &["status", "phase"]).unwrap_or("");
    if matches!(phase, "Terminating" | "Disabling") {
        return verdict(
            Health::Progressing,
            phase_message("status.phase", phase, message),
        );
    }
    if let Some(a) = generation_lag(obj) {
        return a;
    }
    let conds = conditions(obj);
    match phase {
        "" => waiting("Kruise Rollout"),
        "Healthy" => match find(&conds, "Succeeded") {
            Some(c) if state(c) == "False" => {
                let why = find(&conds, "Progressing")
                    .map(|p| cstr(p, "message"))
                    .filter(|m| !m.is_empty())
                    .unwrap_or("the release was cancelled");
                verdict(
                    Health::Healthy,
                    format!(
                        "status.phase is Healthy; the last release did not complete ({}: {why})",
                        say(c)
                    ),
                )
            }
            _ => verdict(
                Health::Healthy,
                phase_message("status.phase", phase, message),
            ),
        },
        "Disabled" => verdict(
            Health::Suspended,
            phase_message(
                "status.phase",
                phase,
                message.or(Some("spec.disabled is true")),
            ),
        ),
        "Initial" => verdict(
            Health::Progressing,
            phase_message("status.phase", phase, message),
        ),
        "Progressing" => rollout_progressing(obj, &conds, message),
        p => verdict(Health::Unknown, phase_message("status.phase", p, message)),
    }
}

/// A Kruise Rollout in the `Progressing` phase ([`kruise_rollout`]).
fn rollout_progressing(obj: &Live, conds: &[&Cond], message: Option<&str>) -> Assessment {
    let progressing = find(conds, "Progressing");
    if let Some(m) = message
        .or_else(|| progressing.map(|c| cstr(c, "message")))
        .filter(|m| m.contains("please rollback first"))
    {
        return verdict(
            Health::Degraded,
            phase_message("status.phase", "Progressing", Some(m)),
        );
    }
    if true_at(obj, &["spec", "strategy", "paused"]) {
        return verdict(
            Health::Suspended,
            "spec.strategy.paused is true: the rollout is paused",
        );
    }
    if let Some(c) = progressing
        && cstr(c, "reason") == "Paused"
    {
        return verdict(Health::Suspended, say(c));
    }
    let step = rollout_step(obj);
    let step_state = rollout_step_state(obj);
    let steps = first(
        obj,
        &[
            &["spec", "strategy", "canary", "steps"],
            &["spec", "strategy", "blueGreen", "steps"],
        ],
    )
    .and_then(Value::as_array);
    let of = |i: i64| match steps {
        Some(s) => format!("step {i} of {}", s.len()),
        None => format!("step {i}"),
    };
    if step_state == "StepPaused"
        && let Some(m) = message.filter(|m| m.contains("manually confirm"))
    {
        return verdict(
            Health::Suspended,
            format!(
                "{}waiting for manual confirmation to go on: {m}",
                step.map(|i| format!("{} is paused, ", of(i)))
                    .unwrap_or_default()
            ),
        );
    }
    if step_state == "StepPaused"
        && let Some(i) = step
    {
        let duration = steps
            .and_then(|s| s.get(usize::try_from(i - 1).ok()?))
            .map(|s| s.get("pause").and_then(|p| p.get("duration")));
        return match duration {
            Some(None) => verdict(
                Health::Suspended,
                format!(
                    "{} is paused, waiting for manual confirmation to go on{}",
                    of(i),
                    message.map(|m| format!(": {m}")).unwrap_or_default()
                ),
            ),
            Some(Some(d)) => verdict(
                Health::Progressing,
                format!("{} pauses for {d} seconds", of(i)),
            ),
            None => verdict(
                Health::Progressing,
                phase_message("status.phase", "Progressing", message),
            ),
        };
    }
    let at = match (step, step_state) {
        (Some(i), s) if !s.is_empty() => format!(" ({}: {s})", of(i)),
        _ => String::new(),
    };
    match progressing {
        Some(c) => verdict(Health::Progressing, format!("{}{at}", say(c))),
        None => verdict(
            Health::Progressing,
            format!(
                "{}{at}",
                phase_message("status.phase", "Progressing", message)
            ),
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// game.kruise.io.

/// The first container of a pod status waiting or terminated for a reason that names a
/// failure (`CrashLoopBackOff`, `ImagePullBackOff`, `ErrImagePull`,
/// `CreateContainerConfigError`, `Error`, `OOMKilled`), as `container: reason: message`.
fn failing_container(pod: &Value) -> Option<String> {
    for list in ["initContainerStatuses", "containerStatuses"] {
        let statuses = pod.get(list).and_then(Value::as_array);
        for s in statuses.into_iter().flatten() {
            let name = s.get("name").and_then(Value::as_str).unwrap_or("?");
            for st in ["waiting", "terminated"] {
                let Some(w) = s.get("state").and_then(|x| x.get(st)) else {
                    continue;
                };
                let reason = w.get("reason").and_then(Value::as_str).unwrap_or("");
                let failed = reason.starts_with("Err")
                    || reason.ends_with("Error")
                    || reason.ends_with("BackOff")
                    || (st == "terminated"
                        && list == "containerStatuses"
                        && matches!(reason, "Error" | "OOMKilled" | "ContainerCannotRun"));
                if failed {
                    let message = w
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .trim();
                    return Some(if message.is_empty() {
                        format!("container {name}: {reason}")
                    } else {
                        format!("container {name}: {reason}: {message}")
                    });
                }
            }
        }
    }
    None
}

/// OpenKruiseGame GameServer: no status (or no `status.currentState`) is `Progressing`;
/// `currentState` `Crash` (its pod failed) is `Degraded`; a container of the pod
/// (`status.podStatus`) failing to start or run (`CrashLoopBackOff`, `ImagePullBackOff`, ...)
/// is `Degraded`; the `NodeNormal` condition `False` (the node is not ready or under pressure)
/// is `Degraded`, and `PersistentVolumeNormal` `False` too, but for a claim not bound yet
/// (`PersistentVolume Not Found`: `Progressing`); then `currentState` against `desiredState`
/// (`Ready`): `Ready` is `Healthy` (with `spec.opsState`), `Creating`, `NotReady`,
/// `Updating`, `PreUpdate`, `PreDelete` and `Deleting` are `Progressing` (with the `PodNormal`
/// condition's reason, or a pod condition such as `KruisePodReady=False`: Kruise holding the
/// pod out of service while it updates it in place), `Unknown` is `Unknown`.
///
/// Follows openkruise/kruise-game `apis/v1alpha1/gameserver_types.go` (`GameServerState`,
/// `GameServerStatus`, `NodeNormal`, `PersistentVolumeNormal`, `PodNormal`),
/// `pkg/controllers/gameserver/gameserver_manager.go` (`SyncGsToPod`: the state from the pod's
/// phase, lifecycle and `Ready` condition; `SyncPodToGs`: `desiredState` `Ready`) and
/// `pkg/controllers/gameserver/gameserver_conditions.go` (`getPodConditions`,
/// `getNodeConditions`, `pvNotFoundCondition`), and openkruise/kruise
/// `apis/apps/pub/pod_readiness_gate.go` (`KruisePodReady`).
///
/// Differs from Argo CD's check, which reads `KruisePodReady=False` as `Degraded` and no status
/// as `Unknown`: the readiness gate is Kruise's own, set `False` while it updates or recreates
/// a container on purpose (`Progressing`), and a GameServer not yet reported on waits for its
/// controller (`Progressing`).
pub(super) fn game_server(obj: &Live) -> Assessment {
    let current = str_at(obj, &["status", "currentState"]).filter(|s| !s.is_empty());
    let Some(current) = current else {
        return waiting("OpenKruiseGame");
    };
    let desired = str_at(obj, &["status", "desiredState"])
        .filter(|s| !s.is_empty())
        .unwrap_or("Ready");
    let conds = conditions(obj);
    let pod = value(obj, &["status", "podStatus"]);
    let pod_normal = find(&conds, "PodNormal").filter(|c| state(c) == "False");
    if current == "Crash" {
        let why = pod_normal
            .map(say)
            .or_else(|| pod.and_then(failing_container))
            .map(|w| format!(": {w}"))
            .unwrap_or_default();
        return verdict(
            Health::Degraded,
            format!("status.currentState is Crash (its pod failed){why}"),
        );
    }
    if let Some(c) = pod.and_then(failing_container) {
        return verdict(
            Health::Degraded,
            format!("status.currentState is {current}; {c}"),
        );
    }
    if let Some(c) = find(&conds, "NodeNormal")
        && state(c) == "False"
    {
        return verdict(Health::Degraded, say(c));
    }
    if let Some(c) = find(&conds, "PersistentVolumeNormal")
        && state(c) == "False"
    {
        let health = if cstr(c, "reason") == "PersistentVolume Not Found" {
            Health::Progressing
        } else {
            Health::Degraded
        };
        return verdict(health, say(c));
    }
    let pod_gate = pod
        .map(|p| super::conditions_in(p.get("conditions")))
        .unwrap_or_default()
        .into_iter()
        .find(|c| cstr(c, "type") == "KruisePodReady" && state(c) != "True");
    let why = pod_normal
        .or(pod_gate)
        .map(|c| format!(" ({})", say(c)))
        .unwrap_or_default();
    let ops = str_at(obj, &["spec", "opsState"])
        .filter(|s| !s.is_empty() && *s != "None")
        .map(|s| format!(", spec.opsState is {s}"))
        .unwrap_or_default();
    match current {
        "Ready" if desired == "Ready" && why.is_empty() => verdict(
            Health::Healthy,
            format!("status.currentState is Ready{ops}"),
        ),
        "Unknown" => verdict(
            Health::Unknown,
            format!("status.currentState is Unknown{why}"),
        ),
        _ => verdict(
            Health::Progressing,
            format!("status.currentState is {current}, desiredState {desired}{why}{ops}"),
        ),
    }
}

/// OpenKruiseGame GameServerSet: `spec.updateStrategy.rollingUpdate.paused` is `Suspended`; no
/// status, or the latest spec not observed, is `Progressing`; then the counters
/// ([`workload`]): `spec.replicas` less `rollingUpdate.partition` against `updatedReplicas` and
/// `updatedReadyReplicas`, `currentReplicas` (the GameServers' pods there) and
/// `availableReplicas`; a partition holding GameServers at the old revision is `Suspended`.
///
/// Follows openkruise/kruise-game `apis/v1alpha1/gameserverset_types.go`
/// (`GameServerSetStatus`, `RollingUpdateStatefulSetStrategy`: `partition`, `paused`) and
/// `pkg/controllers/gameserverset/gameserverset_manager.go` (`SyncStatus`: the counters are the
/// underlying Advanced StatefulSet's, `replicas` is `spec.replicas`, `currentReplicas` the
/// pods).
///
/// Differs from Argo CD's check, which reads `updatedReadyReplicas` equal to `replicas` as
/// `Healthy` and a partition as `Suspended` as soon as enough GameServers are updated: here the
/// GameServers must be updated (`updatedReplicas`) and available, and a partition holds the
/// rollout once the updated ones are ready, as for the other Kruise workloads.
pub(super) fn game_server_set(obj: &Live) -> Assessment {
    if true_at(obj, &["spec", "updateStrategy", "rollingUpdate", "paused"]) {
        return paused("spec.updateStrategy.rollingUpdate.paused");
    }
    if status(obj).is_none() {
        return waiting("OpenKruiseGame");
    }
    if let Some(a) = generation_lag(obj) {
        return a;
    }
    let want = int_at(obj, &["spec", "replicas"])
        .or_else(|| int_at(obj, &["status", "replicas"]))
        .unwrap_or(0);
    let partition = rolling_partition(obj, want);
    let updated = count(obj, &["status", "updatedReplicas"]);
    workload(&Rollout {
        what: "GameServerSet",
        pods: "GameServers",
        want,
        partition,
        partition_field: "spec.updateStrategy.rollingUpdate.partition",
        on_delete: on_delete(obj),
        total: int_at(obj, &["status", "currentReplicas"]),
        updated,
        updated_available: Some(count(obj, &["status", "updatedReadyReplicas"])),
        available: int_at(obj, &["status", "availableReplicas"])
            .unwrap_or_else(|| count(obj, &["status", "readyReplicas"])),
        held: updated < want,
        revision: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn partitions_scale_as_the_controllers_do() {
        assert_eq!(scaled(&json!(3), 10, true), Some(3));
        assert_eq!(scaled(&json!("3"), 10, true), Some(3));
        assert_eq!(scaled(&json!("25%"), 10, true), Some(3));
        assert_eq!(scaled(&json!("25%"), 10, false), Some(2));
        assert_eq!(scaled(&json!("x%"), 10, false), None);
    }
}
