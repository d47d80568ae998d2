//! The RabbitMQ Cluster Operator (`rabbitmq.com` RabbitmqCluster) and the Messaging Topology
//! Operator (`rabbitmq.com` Queue, Exchange, Binding, User, Vhost, Policy, ...), each read from
//! the operator's own status code (the doc comment of every rule names the files).

use super::{
    OnFalse, ReadyRule, conditions, cstr, find, generation_lag, label, ready_condition, say, state,
    status, str_at, verdict, waiting,
};
use crate::health::Live;
use crate::health::{Assessment, Health};

/// Who writes a RabbitmqCluster's status, for messages.
const CLUSTER_OPERATOR: &str = "the RabbitMQ Cluster Operator";

/// The label that stops the Cluster Operator reconciling a RabbitmqCluster.
const PAUSE_LABEL: &str = "rabbitmq.com/pauseReconciliation";

/// RabbitMQ Cluster Operator RabbitmqCluster: the `rabbitmq.com/pauseReconciliation: "true"`
/// label is `Suspended`; no status (or no conditions) is `Progressing`; `ReconcileSuccess`
/// `False` (invalid configuration, a failed CLI command, a scale-down it refuses, a TLS error)
/// is `Degraded`, read before the generation since `status.observedGeneration` moves only on a
/// successful reconcile; then `ReconcileSuccess` `Unknown` (`Initialising`), or the latest spec
/// not observed, is `Progressing`; `AllReplicasReady` `False` with reason `ScaledToZero` is
/// `Suspended` (scaled to zero replicas on purpose); `ClusterAvailable` or `AllReplicasReady`
/// `False` or `Unknown` (no endpoint, pods not ready yet, the StatefulSet not created yet) is
/// `Progressing`; both `True` is `Healthy`, with a `NoWarnings=False` warning (memory request
/// and limit differ) and a `status.quorumStatus` other than `ok` in the message.
///
/// Follows rabbitmq/cluster-operator `internal/status/status.go` (`AllReplicasReady`,
/// `ClusterAvailable`, `NoWarnings`, `ReconcileSuccess`), `internal/status/all_replicas_ready.go`
/// (`ScaledToZero`, `NotAllPodsReady`, `MissingStatefulSet`), `internal/status/cluster_available.go`,
/// `internal/status/no_warnings.go`, `api/v1beta1/rabbitmqcluster_status.go`
/// (`SetConditions`: `ReconcileSuccess` `Unknown` `Initialising` at first; `quorumStatus`) and
/// `internal/controller/rabbitmqcluster_controller.go` (`pauseReconciliationLabel`,
/// `setReconcileSuccess`: `observedGeneration` set only with `ReconcileSuccess=True`).
pub(super) fn cluster(obj: &Live) -> Assessment {
    if label(obj, PAUSE_LABEL) == Some("true") {
        return verdict(
            Health::Suspended,
            format!("the {PAUSE_LABEL} label is true: the operator does not reconcile it"),
        );
    }
    let conds = conditions(obj);
    if status(obj).is_none() || conds.is_empty() {
        return waiting(CLUSTER_OPERATOR);
    }
    let reconciled = find(&conds, "ReconcileSuccess");
    if let Some(c) = reconciled
        && state(c) == "False"
    {
        return verdict(Health::Degraded, say(c));
    }
    if let Some(c) = reconciled
        && state(c) != "True"
    {
        return verdict(Health::Progressing, say(c));
    }
    if let Some(a) = generation_lag(obj) {
        return a;
    }
    let replicas = find(&conds, "AllReplicasReady");
    let available = find(&conds, "ClusterAvailable");
    if let Some(c) = replicas
        && state(c) == "False"
        && cstr(c, "reason") == "ScaledToZero"
    {
        return verdict(Health::Suspended, say(c));
    }
    for c in [available, replicas].into_iter().flatten() {
        if state(c) != "True" {
            return verdict(Health::Progressing, say(c));
        }
    }
    let (Some(r), Some(a)) = (replicas, available) else {
        return verdict(
            Health::Progressing,
            format!(
                "waiting for {CLUSTER_OPERATOR} to set the AllReplicasReady and ClusterAvailable conditions"
            ),
        );
    };
    let mut message = format!("{}; {}", say(r), say(a));
    if let Some(w) = find(&conds, "NoWarnings")
        && state(w) == "False"
    {
        message.push_str(&format!("; warning: {}", say(w)));
    }
    if let Some(q) = str_at(obj, &["status", "quorumStatus"])
        .map(str::trim)
        .filter(|q| !q.is_empty() && !q.starts_with("ok"))
    {
        message.push_str(&format!("; status.quorumStatus is {q}"));
    }
    verdict(Health::Healthy, message)
}

/// The Messaging Topology Operator writes `Ready=False` (`FailedCreateOrUpdate`) only when
/// declaring the object in RabbitMQ failed, or the RabbitmqCluster it names could not be used.
const TOPOLOGY: ReadyRule = ReadyRule {
    operator: "the RabbitMQ Messaging Topology Operator",
    condition: "Ready",
    on_false: OnFalse::Degraded { except: &[] },
};

/// Messaging Topology Operator kinds (Queue, Exchange, Binding, User, Vhost, Policy,
/// OperatorPolicy, Permission, TopicPermission, Federation, Shovel, SchemaReplication,
/// SuperStream): the `Ready` condition ([`ready_condition`]): `True`
/// (`SuccessfulCreateOrUpdate`) is `Healthy`, `False` (`FailedCreateOrUpdate`: RabbitMQ refused
/// the declaration, the credentials or the cluster reference are wrong, the vhost is not
/// allowed) is `Degraded`, read before the generation since `status.observedGeneration` moves
/// only with `Ready=True`; the latest spec not observed yet is `Progressing`; no status yet is
/// `Progressing`. `Ready=False` because the RabbitmqCluster is scaled to zero ("RabbitmqCluster
/// is scaled to zero replicas; waiting for it to scale up") is `Suspended`, as the cluster is.
///
/// Follows rabbitmq/messaging-topology-operator `api/v1beta1/conditions.go` (`Ready`:
/// "the last Create/Update operator on the CR was successful", `NotReady`),
/// `internal/controller/topology_controller.go` (`Reconcile`: `Ready` then
/// `setObservedGeneration`; `handleRMQReferenceParseError`: `ErrClusterScaledToZero`) and the
/// kinds' `api/v1beta1/*_types.go` (`Status.Conditions`, `ObservedGeneration`).
///
/// Differs from Argo CD's checks, which read no status as `Unknown` and `Ready=True` as
/// `Healthy` even when `observedGeneration` is behind: both wait for the operator here.
pub(super) fn topology(obj: &Live) -> Assessment {
    let conds = conditions(obj);
    if let Some(c) = find(&conds, "Ready")
        && state(c) == "False"
        && cstr(c, "message").contains("scaled to zero")
    {
        return verdict(Health::Suspended, say(c));
    }
    ready_condition(obj, &TOPOLOGY)
}
