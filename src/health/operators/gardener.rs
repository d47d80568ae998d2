//! Gardener (gardener/gardener): the Shoot, a Kubernetes cluster Gardener runs
//! (`core.gardener.cloud`).
//!
//! Gardener's care controller sums a Shoot's health up in the label
//! `shoot.gardener.cloud/status` (`pkg/apis/core/v1beta1/constants/types_constants.go`
//! `ShootStatus`): `healthy`, `progressing` (an issue within the grace period), `unhealthy` or
//! `unknown` (`pkg/utils/gardener/shoot_status.go`), computed from the conditions, whose status
//! may also be `Progressing`. The last operation (create, reconcile, ...) is `Processing`,
//! `Succeeded`, `Error` (will be retried), `Failed` (will not), `Pending` or `Aborted`
//! (`pkg/apis/core/v1beta1/types_common.go` `LastOperationState`).
//!
//! Pure: no I/O.

use serde_json::Value;

use super::{
    conditions, generation_lag, label, phase_message, say, state, status, str_at, true_at, verdict,
    waiting,
};
use crate::health::Live;
use crate::health::{Assessment, Health};

/// A Shoot's health, in this order:
/// 1. no status yet: `Progressing` (waiting for Gardener);
/// 2. the last operation `Failed` or `Aborted`, or `Error` with `status.lastErrors`, or the
///    label `unhealthy`: `Degraded` (with the operation's description or the first error);
/// 3. `status.observedGeneration` behind: `Progressing`;
/// 4. hibernated as `spec.hibernation.enabled` asks (`status.hibernated`): `Suspended`;
/// 5. the last operation `Processing`, `Pending` or `Error` (to be retried), or the label
///    `progressing`: `Progressing`;
/// 6. the label `unknown`: `Unknown` (the label is the care controller's summary of the
///    conditions, so it is read before them);
/// 7. a condition `Progressing` or `False` (no label yet): `Progressing`; `Unknown`: `Unknown`;
/// 8. otherwise `Healthy` (the label `healthy`, every condition `True`).
pub(super) fn shoot(obj: &Live) -> Assessment {
    let Some(st) = status(obj) else {
        return waiting("Gardener");
    };
    let label = label(obj, "shoot.gardener.cloud/status").unwrap_or_default();
    let op_state = str_at(obj, &["status", "lastOperation", "state"]).unwrap_or_default();
    let op_type = str_at(obj, &["status", "lastOperation", "type"]).unwrap_or("operation");
    let op_said = || {
        phase_message(
            &format!("last {op_type}"),
            op_state,
            str_at(obj, &["status", "lastOperation", "description"]),
        )
    };
    let last_error = st
        .get("lastErrors")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
        .and_then(|e| e.get("description"))
        .and_then(Value::as_str);
    if matches!(op_state, "Failed" | "Aborted") {
        return verdict(Health::Degraded, op_said());
    }
    if op_state == "Error"
        && let Some(e) = last_error
    {
        return verdict(Health::Degraded, format!("{}: {e}", op_said()));
    }
    let conds = conditions(obj);
    if label == "unhealthy" {
        let failing: Vec<String> = conds
            .iter()
            .filter(|c| state(c) == "False")
            .map(|c| say(c))
            .collect();
        let why = if failing.is_empty() {
            String::new()
        } else {
            format!(": {}", failing.join("; "))
        };
        return verdict(
            Health::Degraded,
            format!("shoot.gardener.cloud/status is unhealthy{why}"),
        );
    }
    if let Some(a) = generation_lag(obj) {
        return a;
    }
    if true_at(obj, &["spec", "hibernation", "enabled"]) && true_at(obj, &["status", "hibernated"])
    {
        return verdict(Health::Suspended, "hibernated (spec.hibernation.enabled)");
    }
    if matches!(op_state, "Processing" | "Pending" | "Error") {
        return verdict(Health::Progressing, op_said());
    }
    if label == "progressing" {
        return verdict(
            Health::Progressing,
            "shoot.gardener.cloud/status is progressing",
        );
    }
    if label == "unknown" {
        return verdict(Health::Unknown, "shoot.gardener.cloud/status is unknown");
    }
    if let Some(c) = conds
        .iter()
        .find(|c| matches!(state(c), "Progressing" | "False"))
    {
        return verdict(Health::Progressing, say(c));
    }
    if let Some(c) = conds.iter().find(|c| state(c) == "Unknown") {
        return verdict(Health::Unknown, say(c));
    }
    verdict(
        Health::Healthy,
        if label == "healthy" {
            "shoot.gardener.cloud/status is healthy".to_string()
        } else {
            op_said()
        },
    )
}
