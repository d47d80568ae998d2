//! MinIO Operator (`minio.min.io`): Tenant.

use super::{Assessment, Health, status, str_at, verdict, waiting};
use crate::health::Live;

/// The MinIO Operator's `status.currentState` texts that say the tenant cannot go on without
/// a person: a StatefulSet it does not own, a second tenant in the namespace, missing root
/// credentials, pools on different MinIO versions (`Zones` before pools were renamed), a pool
/// removed from the spec that may not be decommissioned.
const MINIO_FAILED: &[&str] = &[
    "Statefulset not controlled by operator",
    "Another MinIO Tenant already exists in the namespace",
    "Tenant credentials are not set properly",
    "Different versions across MinIO Pools",
    "Different versions across MinIO Zones",
    "Pool Decommissioning Not Allowed",
];

/// MinIO Tenant: `status.currentState` is the text of the last step the operator took.
///
/// - a failure constant ([`MINIO_FAILED`]) or `Can't modify server count for pool ...` is
///   `Degraded`;
/// - `Provisioning ...`, `Waiting for ...`, `Updating ...`, `Restarting MinIO` and
///   `Tenant '...' MinIO is already running the most recent version of ...` (written after an
///   in-place update found nothing to do) are `Progressing`;
/// - `Initialized` (`Ready` before v4) is `Healthy`, unless `status.healthStatus`, which the
///   operator's health monitor writes, is `red` (`Degraded`: offline or write quorum lost),
///   `yellow` with `healthMessage` `Healing` (`Progressing`: drives healing) or another `yellow`
///   (`Degraded`: drives offline or pods not running, "Reduced Availability");
/// - any other text is `Degraded`: past the constants above, the operator writes only the text
///   of an error there (`empty tenant credentials`, the tenant's validation errors such as
///   `pools must be configured`, failed in-place updates). Argo CD reads an unknown text as
///   `Progressing`; a tenant whose operator reported an error does not make progress by itself.
/// - no status is `Progressing` (waiting for the operator).
///
/// Follows minio/operator `pkg/controller/main-controller.go` (the `Status*` constants and each
/// `updateTenantStatus` call, in `syncHandler` and `updateServer`),
/// `pkg/controller/monitoring.go` (`HealthStatus*`, `Health*Message`) and
/// `pkg/apis/minio.min.io/v2/types.go` (`TenantStatus`, `HealthStatus`).
pub(super) fn tenant(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return waiting("the MinIO Operator");
    }
    let Some(current) = str_at(obj, &["status", "currentState"]).filter(|s| !s.trim().is_empty())
    else {
        return verdict(
            Health::Progressing,
            "waiting for the MinIO Operator to report status.currentState",
        );
    };
    let message = format!("status.currentState is {current}");
    if MINIO_FAILED.contains(&current) || current.starts_with("Can't modify server count") {
        return verdict(Health::Degraded, message);
    }
    if ["Provisioning", "Waiting", "Updating", "Restarting"]
        .iter()
        .any(|p| current.starts_with(p))
        || current.contains("is already running the most recent version")
    {
        return verdict(Health::Progressing, message);
    }
    if !matches!(current, "Initialized" | "Ready") {
        return verdict(
            Health::Degraded,
            format!("{message} (an error reported by the MinIO Operator)"),
        );
    }
    let health_message = str_at(obj, &["status", "healthMessage"])
        .map(str::trim)
        .filter(|m| !m.is_empty());
    let with_health = |h: &str| match health_message {
        Some(m) => format!("{message}, status.healthStatus is {h}: {m}"),
        None => format!("{message}, status.healthStatus is {h}"),
    };
    match str_at(obj, &["status", "healthStatus"]) {
        Some(h @ "red") => verdict(Health::Degraded, with_health(h)),
        Some(h @ "yellow") if health_message == Some("Healing") => {
            verdict(Health::Progressing, with_health(h))
        }
        Some(h @ "yellow") => verdict(Health::Degraded, with_health(h)),
        Some(h @ "green") => verdict(Health::Healthy, with_health(h)),
        Some(h) if !h.is_empty() => verdict(
            Health::Unknown,
            format!("{message}, status.healthStatus is {h} (none of green, yellow, red)"),
        ),
        _ => verdict(Health::Healthy, message),
    }
}
