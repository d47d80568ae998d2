//! Karpenter (`karpenter.sh`: NodePool, NodeClaim; `karpenter.k8s.aws`: EC2NodeClass).

use super::{
    Assessment, Health, conditions, cstr, find, say, stale, stale_condition, state, status,
    verdict, waiting,
};
use crate::health::Live;

/// The conditions Karpenter's `Ready` is computed from (awslabs/operatorpkg
/// `status.NewReadyConditions`), per kind.
fn dependents(group: &str, kind: &str) -> Option<&'static [&'static str]> {
    Some(match (group, kind) {
        ("karpenter.sh", "NodeClaim") => &["Launched", "Registered", "Initialized"],
        ("karpenter.sh", "NodePool") => &["ValidationSucceeded", "NodeClassReady"],
        ("karpenter.k8s.aws", "EC2NodeClass") => &[
            "AMIsReady",
            "SubnetsReady",
            "SecurityGroupsReady",
            "InstanceProfileReady",
            "ValidationSucceeded",
            "CapacityReservationsReady",
        ],
        _ => return None,
    })
}

/// Karpenter NodePool, NodeClaim and EC2NodeClass: Karpenter's conditions follow
/// awslabs/operatorpkg, where `Ready` is `True` when every dependent condition is, `False` when
/// one is, and `Unknown` otherwise.
///
/// - a dependent condition `False` (a NodePool's `ValidationSucceeded`/`NodeClassReady`, a
///   NodeClaim's `Registered` with `MultipleNodesFound`, an EC2NodeClass's `SubnetsReady`,
///   `AMIsReady`, `InstanceProfileReady`, ...), a NodeClaim's `Launched=Unknown` with a reason
///   other than operatorpkg's initial `AwaitingReconciliation` (written only when the cloud
///   provider's create call failed: `LaunchFailed`, `InsufficientCapacity`, ...), `Ready=False`, a NodePool's
///   `NodeRegistrationHealthy=False` (nodes it launches fail to register: "requires manual
///   investigation") or a NodeClaim's `ConsistentStateFound=False` is `Degraded`;
/// - a NodeClaim being deleted (`metadata.deletionTimestamp`, `InstanceTerminating=True`) or
///   chosen for disruption (`DisruptionReason=True`: `Drifted`, `Underutilized`, `Empty`,
///   `Expired`, ...) is `Progressing` (Karpenter is replacing it);
/// - `Ready=True` of the current generation is `Healthy`; `Ready` of an older generation,
///   `Unknown` (a NodeClaim launched, waiting for its Node to register and initialize), or none
///   yet is `Progressing`; no status is `Progressing`.
///
/// Where this differs from Argo CD's Lua check: a NodeClaim chosen for disruption is
/// `Progressing` rather than `Suspended` (nothing is paused: Karpenter is replacing the node),
/// and the dependent conditions are read, so a failed launch (`Launched=Unknown`,
/// `LaunchFailed`) is `Degraded` although `Ready` is only `Unknown`.
///
/// Follows kubernetes-sigs/karpenter `pkg/apis/v1/nodeclaim_status.go` and
/// `pkg/apis/v1/nodepool_status.go` (the `ConditionType*` constants and `StatusConditions`),
/// `pkg/controllers/nodeclaim/lifecycle/launch.go`, `registration.go`, `initialization.go`
/// (the reasons written), `pkg/controllers/nodeclaim/consistency/controller.go`,
/// `pkg/controllers/disruption/queue.go`, and aws/karpenter-provider-aws
/// `pkg/apis/v1/ec2nodeclass_status.go`.
pub(super) fn assess(obj: &Live) -> Option<Assessment> {
    let deps = dependents(obj.group(), obj.kind())?;
    if status(obj).is_none() {
        return Some(waiting("Karpenter"));
    }
    let conds = conditions(obj);
    let current = |c: &&super::Cond| !stale(obj, c);
    for t in deps {
        if let Some(c) = find(&conds, t).filter(current)
            && state(c) == "False"
        {
            return Some(verdict(Health::Degraded, say(c)));
        }
    }
    // The launch controller sets `Launched=Unknown` with a reason only when the cloud provider's
    // create call failed; `AwaitingReconciliation` is operatorpkg's initial reason.
    if let Some(c) = find(&conds, "Launched")
        && state(c) == "Unknown"
        && !matches!(cstr(c, "reason"), "" | "AwaitingReconciliation")
        && obj.kind() == "NodeClaim"
    {
        return Some(verdict(Health::Degraded, say(c)));
    }
    for t in ["NodeRegistrationHealthy", "ConsistentStateFound", "Ready"] {
        if let Some(c) = find(&conds, t).filter(current)
            && state(c) == "False"
        {
            return Some(verdict(Health::Degraded, say(c)));
        }
    }
    if obj.kind() == "NodeClaim" {
        if obj.metadata().contains_key("deletionTimestamp") {
            return Some(verdict(
                Health::Progressing,
                "the NodeClaim is being deleted",
            ));
        }
        for t in ["InstanceTerminating", "DisruptionReason"] {
            if let Some(c) = find(&conds, t)
                && state(c) == "True"
            {
                return Some(verdict(Health::Progressing, say(c)));
            }
        }
    }
    Some(match find(&conds, "Ready") {
        Some(c) if stale(obj, c) => stale_condition(obj, c),
        Some(c) if state(c) == "True" => verdict(Health::Healthy, say(c)),
        Some(c) => {
            let waiting_on = deps
                .iter()
                .filter_map(|t| find(&conds, t))
                .find(|d| state(d) != "True");
            match waiting_on {
                Some(d) => verdict(Health::Progressing, format!("{}; {}", say(c), say(d))),
                None => verdict(Health::Progressing, say(c)),
            }
        }
        None => verdict(
            Health::Progressing,
            "waiting for Karpenter to set the Ready condition",
        ),
    })
}
