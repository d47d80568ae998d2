//! Argo CD's own kinds that have a rule here: ApplicationSet (`argoproj.io`). Argo CD's
//! Application is left to the generic rules.

use serde_json::Value;

use super::super::{Assessment, Health, conditions_in, cstr};
use super::{conditions, find, say, state, status, str_at, value, verdict, waiting};
use crate::health::Live;

/// Argo CD ApplicationSet, by the conditions its controller writes: `ErrorOccurred=True` (the
/// generators, a template, an Application's validation, creation, update or deletion failed;
/// the controller then also writes `ResourcesUpToDate=False`), `ParametersGenerated=False` or
/// `ResourcesUpToDate=False` is `Degraded`; a progressive sync under way (`RolloutProgressing=True`:
/// a step whose Applications are not all `Healthy` yet) is `Progressing`, and so is, when a
/// `RollingSync` strategy is set and no `RolloutProgressing` is written, an Application of
/// `status.applicationStatus` that is `Waiting`, `Pending` or `Progressing`;
/// `ResourcesUpToDate=True` ("All applications have been generated successfully") is
/// `Healthy`; no status or no such condition yet is `Progressing`. `InvalidRolloutConfig=True`
/// (a rolling-sync step that selects nothing or an Application twice) does not stop the
/// controller, which only warns: it is named in a `Healthy` message.
///
/// The controller's own `status.health` (Argo CD 3.4 and later, `CalculateHealth`) is the same
/// reading of the same conditions, with two differences: where no condition is `True` yet it
/// says `Unknown` (`Progressing` here, as in Argo CD's `argoproj.io/ApplicationSet/health.lua`:
/// waiting for the controller), and it does not read `ParametersGenerated=False` or
/// `ResourcesUpToDate=False` (the controller writes them along with `ErrorOccurred=True`; a list
/// that holds them alone still says a generation or an Application write failed). The Lua check
/// does not read `ParametersGenerated=False` or `status.applicationStatus` either.
///
/// Follows argoproj/argo-cd `pkg/apis/application/v1alpha1/applicationset_types.go`
/// (`ApplicationSetConditionType`, `ProgressiveSyncStatusCode`, `CalculateHealth`),
/// `applicationset/controllers/applicationset_controller.go` (`setApplicationSetStatusCondition`)
/// and `applicationset/progressivesync/progressive_sync.go` (`getProgressingCondition`,
/// `getInvalidRolloutConfig`).
pub(super) fn application_set(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return waiting("the ApplicationSet controller");
    }
    let conds = conditions(obj);
    for (type_, failed) in [
        ("ErrorOccurred", "True"),
        ("ParametersGenerated", "False"),
        ("ResourcesUpToDate", "False"),
    ] {
        if let Some(c) = find(&conds, type_)
            && state(c) == failed
        {
            return verdict(Health::Degraded, say(c));
        }
    }
    let rollout = find(&conds, "RolloutProgressing");
    if let Some(c) = rollout
        && state(c) == "True"
    {
        return verdict(Health::Progressing, say(c));
    }
    if rollout.is_none() && str_at(obj, &["spec", "strategy", "type"]) == Some("RollingSync") {
        for (i, app) in conditions_in(value(obj, &["status", "applicationStatus"]))
            .into_iter()
            .enumerate()
        {
            let s = cstr(app, "status");
            if matches!(s, "Waiting" | "Pending" | "Progressing") {
                return verdict(
                    Health::Progressing,
                    format!(
                        "status.applicationStatus[{i}] ({}, step {}) is {s}",
                        cstr(app, "application"),
                        step(app.get("step"))
                    ),
                );
            }
        }
    }
    match find(&conds, "ResourcesUpToDate") {
        Some(c) if state(c) == "True" => {
            let mut message = say(c);
            if let Some(w) = find(&conds, "InvalidRolloutConfig")
                && state(w) == "True"
            {
                message.push_str(&format!(" ({})", say(w)));
            }
            verdict(Health::Healthy, message)
        }
        _ => verdict(
            Health::Progressing,
            "waiting for the ApplicationSet controller to set ResourcesUpToDate",
        ),
    }
}

/// A progressive-sync step (a string, `"1"`, in the status; `?` when absent).
fn step(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "?".into(),
    }
}
