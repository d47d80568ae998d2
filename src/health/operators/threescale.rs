//! The 3scale operator's capabilities kinds (`capabilities.3scale.net`: Product, Backend,
//! ActiveDoc, Application, ApplicationAuth, CustomPolicyDefinition, DeveloperAccount,
//! DeveloperUser, OpenAPI, ProxyConfigPromote, Tenant) and its APIManager (`apps.3scale.net`).

use serde_json::Value;

use super::{
    Assessment, Cond, Health, conditions, cstr, find, generation_lag, phase_message, say, state,
    status, str_at, true_at, verdict, waiting,
};
use crate::health::Live;

/// Who writes these statuses, for messages.
const OPERATOR: &str = "the 3scale operator";

/// 3scale capabilities kinds: each status reconciler writes the whole condition set on every
/// pass (`calculateStatus`): `Invalid=True` (a spec that must be fixed), `Orphan=True` (a
/// reference to a resource that does not exist) and `Failed=True` (the sync with the 3scale API
/// failed; the operator retries) are `Degraded`; `Waiting=True` (DeveloperAccount: its admin
/// DeveloperUser is not there yet) and `In-progress=True` (ProxyConfigPromote) are
/// `Progressing`; then the latest spec not observed yet (`status.observedGeneration`) is
/// `Progressing`; an Application in `status.state` `suspended`, a DeveloperUser in
/// `status.developerUserState` `suspended` and a DeveloperAccount in `status.accountState`
/// `pending` (awaiting an admin's approval in 3scale) are `Suspended`; then the success
/// condition, `Synced` for Product and Backend, `Ready` for the others: `True` is `Healthy`;
/// `False` with a message (the sync error: Application, Tenant) or a reason is `Degraded`; a
/// bare `False` is `Progressing`: the error, if there was one, is in `Failed`, read above, and
/// OpenAPI and Tenant write it while not done yet (OpenAPI's Product and Backends not synced
/// yet; the Tenant's ids not assigned yet). No status, or an empty `conditions: []` (the
/// Tenant's initial status), is `Progressing`: not reconciled yet.
///
/// Follows 3scale/3scale-operator `apis/capabilities/v1beta1/*_types.go` (the
/// `*InvalidConditionType`, `*OrphanConditionType`, `*SyncedConditionType`,
/// `*ReadyConditionType`, `*FailedConditionType`, `DeveloperAccountWaitingConditionType`,
/// `ProxyPromoteConfigInProgressConditionType` constants and their comments),
/// `apis/capabilities/v1alpha1/tenant_types.go` (`TenantReadyConditionType`) and
/// `controllers/capabilities/*_status_reconciler.go` (how each condition is set).
///
/// Departs from Argo CD's checks: a DeveloperAccount's `Waiting=True` is `Progressing`, not
/// `Suspended` (the operator waits for the admin DeveloperUser CR, `createDevAccount` in
/// `controllers/capabilities/developeraccount_threescale_reconciler.go`, and retries by itself).
pub(super) fn capability(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return waiting(OPERATOR);
    }
    let conds = conditions(obj);
    for t in ["Invalid", "Orphan", "Failed"] {
        if let Some(c) = find(&conds, t)
            && state(c) == "True"
        {
            return verdict(Health::Degraded, say(c));
        }
    }
    for t in ["Waiting", "In-progress"] {
        if let Some(c) = find(&conds, t)
            && state(c) == "True"
        {
            return verdict(Health::Progressing, say(c));
        }
    }
    if let Some(a) = generation_lag(obj) {
        return a;
    }
    let kind = obj.kind();
    if let Some(a) = held(obj, kind) {
        return a;
    }
    if conds.is_empty() {
        return verdict(
            Health::Progressing,
            format!("waiting for {OPERATOR} to reconcile it (no status.conditions yet)"),
        );
    }
    let success = match kind {
        "Product" | "Backend" => "Synced",
        _ => "Ready",
    };
    match find(&conds, success) {
        Some(c) if state(c) == "True" => verdict(Health::Healthy, say(c)),
        Some(c) if state(c) == "False" && says_why(c) => verdict(Health::Degraded, say(c)),
        Some(c) => verdict(Health::Progressing, say(c)),
        None => verdict(
            Health::Progressing,
            format!("waiting for {OPERATOR} to set the {success} condition"),
        ),
    }
}

/// Whether a condition carries a message or a reason: a `False` success condition that says
/// why it is not there is a failure.
fn says_why(c: &Cond) -> bool {
    !cstr(c, "message").trim().is_empty() || !cstr(c, "reason").trim().is_empty()
}

/// The states in 3scale that hold an object on purpose: `Suspended`; a suspension asked for in
/// the spec and not applied yet: `Progressing`.
///
/// Follows 3scale/3scale-operator `apis/capabilities/v1beta1/application_types.go`
/// (`spec.suspend`, `status.state`), `developeruser_types.go` (`spec.suspended`,
/// `status.developerUserState`), `developeraccount_types.go` (`status.accountState`) and
/// `controllers/capabilities/application_threescale_reconciler.go` (suspend and resume).
fn held(obj: &Live, kind: &str) -> Option<Assessment> {
    let (field, held_state, asked) = match kind {
        "Application" => ("state", "suspended", Some("suspend")),
        "DeveloperUser" => ("developerUserState", "suspended", Some("suspended")),
        "DeveloperAccount" => ("accountState", "pending", None),
        _ => return None,
    };
    let now = str_at(obj, &["status", field]);
    if now == Some(held_state) {
        let why = match kind {
            "DeveloperAccount" => "waiting for an admin to approve the account in 3scale",
            _ if asked.is_some_and(|f| true_at(obj, &["spec", f])) => "suspended as the spec asks",
            _ => "suspended in 3scale",
        };
        return Some(verdict(
            Health::Suspended,
            phase_message(&format!("status.{field}"), held_state, Some(why)),
        ));
    }
    let asked = asked?;
    (true_at(obj, &["spec", asked]) && now.is_some()).then(|| {
        verdict(
            Health::Progressing,
            format!(
                "spec.{asked} is true, status.{field} is {}: waiting for {OPERATOR} to suspend it",
                now.unwrap_or_default()
            ),
        )
    })
}

/// 3scale APIManager (`apps.3scale.net`): a failed preflight check (`Preflights=False` with
/// "Preflights failed": the requirements of the version are not met, or a multi-minor hop
/// stopped reconciliation) and watched secrets missing (`SecretsAvailable=False`, or
/// `Available=False` with its reason `MissingWatchedSecrets` in older versions) are `Degraded`;
/// `Available=True` (the roll-up of `DeploymentsAvailable`, `RoutesReady` and
/// `SecretsAvailable`) is `Healthy`; otherwise it is `Progressing`, with the sub-condition that
/// is not `True` yet (deployments not available, routes not admitted) and the deployments in
/// `status.deployments.starting`/`stopped`; no status is `Progressing`.
///
/// Follows 3scale/3scale-operator `apis/apps/v1alpha1/apimanager_types.go`
/// (`APIManagerAvailableConditionType`, `APIManagerPreflightsConditionType`,
/// `APIManagerDeploymentsAvailableConditionType`, `APIManagerRoutesReadyConditionType`,
/// `APIManagerSecretsAvailableConditionType`, `APIManagerStatus.Deployments`) and
/// `controllers/apps/apimanager_status_reconciler.go` (`calculateStatus`,
/// `reconcilePreflightsStatus`, `secretsAvailableCondition`).
pub(super) fn api_manager(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return waiting(OPERATOR);
    }
    let conds = conditions(obj);
    if let Some(c) = find(&conds, "Preflights")
        && state(c) == "False"
        && cstr(c, "message").starts_with("Preflights failed")
    {
        return verdict(Health::Degraded, say(c));
    }
    if let Some(c) = find(&conds, "SecretsAvailable")
        .filter(|c| state(c) == "False")
        .or_else(|| {
            find(&conds, "Available")
                .filter(|c| state(c) == "False" && cstr(c, "reason") == "MissingWatchedSecrets")
        })
    {
        return verdict(Health::Degraded, say(c));
    }
    if let Some(a) = generation_lag(obj) {
        return a;
    }
    let available = find(&conds, "Available");
    if let Some(c) = available
        && state(c) == "True"
    {
        return verdict(Health::Healthy, say(c));
    }
    let mut why: Vec<String> = ["DeploymentsAvailable", "RoutesReady", "Preflights"]
        .into_iter()
        .filter_map(|t| find(&conds, t))
        .filter(|c| state(c) != "True")
        .map(say)
        .collect();
    for k in ["starting", "stopped"] {
        let names: Vec<&str> = super::value(obj, &["status", "deployments", k])
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !names.is_empty() {
            why.push(format!("deployments {k}: {}", names.join(", ")));
        }
    }
    let head = available
        .map(say)
        .unwrap_or_else(|| format!("waiting for {OPERATOR} to set the Available condition"));
    if why.is_empty() {
        verdict(Health::Progressing, head)
    } else {
        verdict(Health::Progressing, format!("{head} ({})", why.join("; ")))
    }
}
