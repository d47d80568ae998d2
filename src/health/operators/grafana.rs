//! Grafana Operator (`grafana.integreatly.org`): Grafana and the kinds it synchronises into
//! Grafana instances (GrafanaDashboard, GrafanaDatasource, GrafanaFolder, ...).

use super::{
    Assessment, Health, conditions, cstr, find, phase_message, say, stale, stale_condition, state,
    status, str_at, true_at, value, verdict, waiting,
};
use crate::health::Live;

/// The kinds the Grafana Operator synchronises into Grafana instances, each with a
/// `<Kind>Synchronized` condition.
pub(super) const GRAFANA_SYNCED_KINDS: &[&str] = &[
    "GrafanaDashboard",
    "GrafanaDatasource",
    "GrafanaFolder",
    "GrafanaAlertRuleGroup",
    "GrafanaContactPoint",
    "GrafanaLibraryPanel",
    "GrafanaMuteTiming",
    "GrafanaNotificationPolicy",
    "GrafanaNotificationTemplate",
    "GrafanaManifest",
    "GrafanaServiceAccount",
];

/// The condition types that, `True`, say the resource cannot be synchronised as written: a spec
/// the operator rejects (`InvalidSpec`: `InvalidModel`, `InvalidDuration`, `CyclicParent`, ...),
/// a folder reference that resolves to nothing, a notification policy whose routes loop, or no
/// Grafana instance to apply it to (`NoMatchingInstance`: `EmptyAPIReply` when the
/// `instanceSelector` matches no ready instance, `ErrFetchingInstances`).
const GRAFANA_PROBLEMS: &[&str] = &[
    "InvalidSpec",
    "NoMatchingFolder",
    "NotificationPolicyLoopDetected",
    "NoMatchingInstance",
];

/// The suspension every Grafana Operator kind has: `spec.suspend` or a `Suspended=True`
/// condition (`ApplySuspended`, `ReconcileSuspended`).
fn suspended(obj: &Live) -> Option<Assessment> {
    if true_at(obj, &["spec", "suspend"]) {
        return Some(verdict(Health::Suspended, "spec.suspend is true"));
    }
    let conds = conditions(obj);
    let c = find(&conds, "Suspended").filter(|c| state(c) == "True")?;
    Some(verdict(Health::Suspended, say(c)))
}

/// Grafana: the operator runs its stages in order (`admin user`, `config`, `pvc`,
/// `service account`, `service`, `ingress`, `plugins`, `deployment`, `complete`; only
/// `complete` for an external instance) and writes the one it is at in `status.stage`, with
/// `status.stageStatus` `in progress` (waiting, e.g. for the Deployment to be ready) or `failed`
/// and the error in `status.lastMessage`; after the last one, `success` and the `GrafanaReady`
/// condition. `failed` is `Degraded`; `complete`/`success` is `Healthy` (unless its
/// `GrafanaReady` condition was written for an older generation: `Progressing`); any other stage
/// or `in progress` is `Progressing`; `spec.suspend` is `Suspended`; no status is `Progressing`.
///
/// Follows grafana/grafana-operator `api/v1beta1/grafana_types.go` (`OperatorStageName`,
/// `OperatorStageStatus`, `GrafanaStatus`) and `controllers/grafana_controller.go`
/// (`Reconcile`, `getInstallationStages`, `conditionTypeGrafanaReady`).
pub(super) fn grafana(obj: &Live) -> Assessment {
    if let Some(a) = suspended(obj) {
        return a;
    }
    if status(obj).is_none() {
        return waiting("the Grafana Operator");
    }
    let stage = str_at(obj, &["status", "stage"]).unwrap_or_default();
    let last = str_at(obj, &["status", "lastMessage"]);
    let Some(result) = str_at(obj, &["status", "stageStatus"]).filter(|s| !s.is_empty()) else {
        return verdict(
            Health::Progressing,
            "waiting for the Grafana Operator to report status.stageStatus",
        );
    };
    let message = phase_message(
        "status.stageStatus",
        &format!("{result} at stage {stage}"),
        last,
    );
    match result {
        "failed" => verdict(Health::Degraded, message),
        "success" if stage == "complete" => {
            let conds = conditions(obj);
            match find(&conds, "GrafanaReady") {
                Some(c) if stale(obj, c) => stale_condition(obj, c),
                _ => verdict(Health::Healthy, message),
            }
        }
        _ => verdict(Health::Progressing, message),
    }
}

/// The kinds the Grafana Operator synchronises into every matching Grafana instance
/// ([`GRAFANA_SYNCED_KINDS`]): `spec.suspend` or `Suspended=True` is `Suspended`; a problem
/// condition `True` ([`GRAFANA_PROBLEMS`]), or the pre-conditions `status.NoMatchingInstances:
/// true`, is `Degraded`; the `<Kind>Synchronized` condition `False` (`ApplyFailed`: "failed to be
/// applied for N out of M instances") is `Degraded`, `True` (`ApplySuccessful`) is `Healthy`,
/// written for an older generation is `Progressing`; without it, a status from an operator
/// before conditions (v5.0-v5.14: `status.lastResync` set) is `Healthy`, otherwise
/// `Progressing`; no status is `Progressing`. `FolderUIDMismatch` (the folder's UID was
/// inferred) is a warning the operator synchronises despite, and is not read.
///
/// Follows grafana/grafana-operator `controllers/controller_shared.go` (the condition types
/// and reasons, `setNoMatchingInstancesCondition`, `buildSynchronizedCondition`,
/// `GetScopedMatchingInstances`), the `condition*Synchronized` constants of
/// `controllers/*_controller.go`, and `api/v1beta1/common.go` (`GrafanaCommonSpec.Suspend`,
/// `NoMatchingInstancesResource`).
pub(super) fn synchronized(obj: &Live) -> Assessment {
    if let Some(a) = suspended(obj) {
        return a;
    }
    if status(obj).is_none() {
        return waiting("the Grafana Operator");
    }
    let conds = conditions(obj);
    for t in GRAFANA_PROBLEMS {
        if let Some(c) = find(&conds, t)
            && state(c) == "True"
        {
            return verdict(Health::Degraded, say(c));
        }
    }
    if true_at(obj, &["status", "NoMatchingInstances"]) {
        return verdict(
            Health::Degraded,
            "status.NoMatchingInstances is true: the instanceSelector matches no Grafana instance",
        );
    }
    let synced = conds
        .iter()
        .rev()
        .copied()
        .find(|c| cstr(c, "type").ends_with("Synchronized"));
    match synced {
        Some(c) if state(c) == "False" => verdict(Health::Degraded, say(c)),
        Some(c) if stale(obj, c) => stale_condition(obj, c),
        Some(c) if state(c) == "True" => verdict(Health::Healthy, say(c)),
        Some(c) => verdict(Health::Progressing, say(c)),
        None if value(obj, &["status", "lastResync"]).is_some() => verdict(
            Health::Healthy,
            format!(
                "synchronised at {} (status.lastResync)",
                str_at(obj, &["status", "lastResync"]).unwrap_or_default()
            ),
        ),
        None => verdict(
            Health::Progressing,
            format!(
                "waiting for the Grafana Operator to synchronise the {}",
                obj.kind()
            ),
        ),
    }
}
