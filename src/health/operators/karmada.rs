//! Karmada (`work.karmada.io`): ResourceBinding, ClusterResourceBinding.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{
    Assessment, Health, conditions, find, generation_behind, say, state, status, value, verdict,
    waiting,
};
use crate::health::Live;

/// The member clusters a binding targets, as Karmada's `ObtainBindingSpecExistingClusters`
/// reads them: `spec.clusters[].name` and, for a binding propagated as a dependency,
/// `spec.requiredBy[].clusters[].name`.
fn target_clusters(obj: &Live) -> BTreeSet<&str> {
    fn names(v: Option<&Value>) -> Vec<&str> {
        v.and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c.get("name").and_then(Value::as_str))
            .collect()
    }
    let mut out: BTreeSet<&str> = names(value(obj, &["spec", "clusters"]))
        .into_iter()
        .collect();
    for r in value(obj, &["spec", "requiredBy"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        out.extend(names(r.get("clusters")));
    }
    out
}

/// Karmada ResourceBinding and ClusterResourceBinding: the scheduling and the resource's state
/// in each member cluster (`status.aggregatedStatus[]`).
///
/// - `Scheduled=False` (`NoClusterFit`, `Unschedulable`, `QuotaExceeded`, `SchedulerError`) is
///   `Degraded`;
/// - a member cluster where the resource is not applied and the Work says why
///   (`applied: false` with an `appliedMessage`, the Work's `Applied` condition `False`) or where
///   it is `health: Unhealthy` is `Degraded`;
/// - `status.schedulerObservedGeneration` behind `metadata.generation`, no target cluster yet
///   (`spec.clusters`, `spec.requiredBy[].clusters`), a target cluster with no entry in
///   `aggregatedStatus` yet, a cluster not applied yet (no message: the Work has no `Applied`
///   condition yet) or whose health is `Unknown`, or `FullyApplied=False` is `Progressing`;
/// - applied and `Healthy` in every target cluster is `Healthy`;
/// - no status is `Progressing`.
///
/// Where this differs from Argo CD's Lua check: a cluster where the resource is not applied
/// yet, with no error from the Work, is `Progressing`, not `Degraded` (Karmada writes
/// `applied: false` with an empty message until the Work's `Applied` condition exists); health
/// `Unknown` in an applied cluster is `Progressing`, not `Healthy` (Karmada treats a kind without
/// a health interpreter as `Healthy`, so `Unknown` is a status not collected yet or a failed
/// interpretation); `Scheduled=False` is read.
///
/// Follows karmada-io/karmada `pkg/apis/work/v1alpha2/binding_types.go` (`Scheduled`,
/// `FullyApplied`, `BindingReason*`, `AggregatedStatusItem`, `ResourceHealth`),
/// `pkg/util/helper/workstatus.go` (`assembleWorkStatus`, `worksFullyApplied`),
/// `pkg/util/helper/binding.go` (`ObtainBindingSpecExistingClusters`),
/// `pkg/scheduler/helper.go` (`getConditionByError`) and
/// `pkg/controllers/status/work_status_controller.go` (`interpretHealth`).
pub(super) fn binding(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return waiting("Karmada");
    }
    let conds = conditions(obj);
    let scheduled = find(&conds, "Scheduled");
    if let Some(c) = scheduled
        && state(c) == "False"
    {
        return verdict(Health::Degraded, say(c));
    }
    let items: Vec<&serde_json::Map<String, Value>> = value(obj, &["status", "aggregatedStatus"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
        .collect();
    let text = |m: &serde_json::Map<String, Value>, k: &str| {
        m.get(k)
            .and_then(Value::as_str)
            .map(str::trim)
            .unwrap_or_default()
            .to_string()
    };
    let applied = |m: &serde_json::Map<String, Value>| m.get("applied") == Some(&Value::Bool(true));
    for m in &items {
        let cluster = text(m, "clusterName");
        let message = text(m, "appliedMessage");
        if !applied(m) && !message.is_empty() {
            return verdict(
                Health::Degraded,
                format!("not applied to member cluster {cluster}: {message}"),
            );
        }
        if text(m, "health") == "Unhealthy" {
            return verdict(
                Health::Degraded,
                format!("the resource is Unhealthy in member cluster {cluster}"),
            );
        }
    }
    if let Some((seen, generation)) =
        generation_behind(obj, &["status", "schedulerObservedGeneration"])
    {
        return verdict(
            Health::Progressing,
            format!(
                "waiting for the Karmada scheduler to observe generation {generation} (observed {seen})"
            ),
        );
    }
    let targets = target_clusters(obj);
    if targets.is_empty() && items.is_empty() {
        return verdict(
            Health::Progressing,
            match scheduled {
                Some(c) => format!("scheduled to no member cluster yet ({})", say(c)),
                None => "waiting for the Karmada scheduler to choose member clusters".into(),
            },
        );
    }
    let reported: BTreeSet<String> = items.iter().map(|m| text(m, "clusterName")).collect();
    let missing: Vec<&str> = targets
        .iter()
        .copied()
        .filter(|t| !reported.contains(*t))
        .collect();
    if !missing.is_empty() {
        return verdict(
            Health::Progressing,
            format!(
                "waiting for the status from member cluster(s) {}",
                missing.join(", ")
            ),
        );
    }
    for m in &items {
        let cluster = text(m, "clusterName");
        if !applied(m) {
            return verdict(
                Health::Progressing,
                format!("not applied to member cluster {cluster} yet"),
            );
        }
        let health = text(m, "health");
        if health != "Healthy" {
            let health = if health.is_empty() {
                "not reported"
            } else {
                &health
            };
            return verdict(
                Health::Progressing,
                format!("applied to member cluster {cluster}, health {health} yet"),
            );
        }
    }
    if let Some(c) = find(&conds, "FullyApplied")
        && state(c) != "True"
    {
        return verdict(Health::Progressing, say(c));
    }
    verdict(
        Health::Healthy,
        format!(
            "applied and Healthy in {} member cluster(s): {}",
            reported.len(),
            reported.iter().cloned().collect::<Vec<_>>().join(", ")
        ),
    )
}
