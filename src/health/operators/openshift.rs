//! OpenShift's own kinds: DeploymentConfig (`apps.openshift.io`) and Route
//! (`route.openshift.io`), from openshift/api `apps/v1/types.go`, `apps/v1/consts.go` and
//! `route/v1/types.go`.
//!
//! Pure: no I/O.

use super::{
    conditions, conditions_in, cstr, find, generation_lag, int_at, say, state, status, true_at,
    value, verdict, waiting,
};
use crate::health::Live;
use crate::health::{Assessment, Health};

/// A DeploymentConfig, read as `oc rollout status` reads it: its `Progressing` condition says
/// where the latest rollout is (`apps/v1/consts.go`: `NewReplicationControllerAvailable` when
/// it finished, `ReplicationControllerUpdated`/`NewReplicationControllerCreated` on the way,
/// `ProgressDeadlineExceeded`, `RolloutCancelled` and `ReplicationControllerCreateError` when it
/// failed), and `Available` whether the minimum of pods runs. In this order:
///
/// 1. no status yet: `Progressing`;
/// 2. `Progressing=False` (a deadline exceeded, a rollout cancelled, a controller that could not
///    be created): `Degraded`;
/// 3. `spec.paused`: `Suspended`;
/// 4. `status.observedGeneration` behind: `Progressing`;
/// 5. the latest rollout not finished (`Progressing` not `True` with
///    `NewReplicationControllerAvailable`): `Progressing`;
/// 6. the rollout finished but `Available=False` with replicas wanted: `Degraded` (pods of a
///    finished rollout went away);
/// 7. fewer available replicas than `spec.replicas`: `Progressing`;
/// 8. otherwise `Healthy`.
pub(super) fn deployment_config(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return waiting("OpenShift");
    }
    let conds = conditions(obj);
    let progressing = find(&conds, "Progressing");
    if let Some(c) = progressing
        && state(c) == "False"
    {
        return verdict(Health::Degraded, say(c));
    }
    if true_at(obj, &["spec", "paused"]) {
        return verdict(Health::Suspended, "spec.paused is true");
    }
    if let Some(a) = generation_lag(obj) {
        return a;
    }
    match progressing {
        Some(c)
            if state(c) == "True" && cstr(c, "reason") == "NewReplicationControllerAvailable" => {}
        Some(c) => return verdict(Health::Progressing, say(c)),
        None => {
            return verdict(
                Health::Progressing,
                "waiting for OpenShift to set the Progressing condition",
            );
        }
    }
    let wanted = int_at(obj, &["spec", "replicas"]).unwrap_or(1);
    let available = int_at(obj, &["status", "availableReplicas"]).unwrap_or(0);
    if let Some(c) = find(&conds, "Available")
        && state(c) == "False"
        && wanted > 0
    {
        return verdict(Health::Degraded, say(c));
    }
    if available < wanted {
        return verdict(
            Health::Progressing,
            format!("{available} of {wanted} replicas available"),
        );
    }
    verdict(Health::Healthy, progressing.map(say).unwrap_or_default())
}

/// A Route: each router that serves it reports an `Admitted` condition in `status.ingress[]`
/// (`route/v1/types.go` `RouteIngress`, `RouteAdmitted`). `Admitted=False` (a host another route
/// claimed, a rejected configuration) is `Degraded`; no router has reported yet, or one says
/// `Unknown`, is `Progressing`; every router admitting it is `Healthy`.
pub(super) fn route(obj: &Live) -> Assessment {
    let ingress: Vec<&serde_json::Value> = value(obj, &["status", "ingress"])
        .and_then(serde_json::Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    if ingress.is_empty() {
        return verdict(
            Health::Progressing,
            "waiting for a router to admit the route",
        );
    }
    let mut worst = verdict(Health::Healthy, "admitted");
    for i in ingress {
        let router = i.get("routerName").and_then(|r| r.as_str()).unwrap_or("?");
        let conds = conditions_in(i.get("conditions"));
        let a = match find(&conds, "Admitted") {
            Some(c) if state(c) == "True" => continue,
            Some(c) if state(c) == "False" => {
                verdict(Health::Degraded, format!("router {router}: {}", say(c)))
            }
            Some(c) => verdict(Health::Progressing, format!("router {router}: {}", say(c))),
            None => verdict(
                Health::Progressing,
                format!("router {router}: no Admitted condition yet"),
            ),
        };
        if a.health > worst.health {
            worst = a;
        }
    }
    worst
}
