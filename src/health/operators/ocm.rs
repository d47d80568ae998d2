//! Open Cluster Management's governance policies (`policy.open-cluster-management.io`: Policy,
//! ConfigurationPolicy, CertificatePolicy, OperatorPolicy).

use serde_json::{Map, Value};

use super::{
    Assessment, Health, conditions, cstr, find, generation_behind, generation_lag, say, state,
    status, str_at, true_at, value, verdict, waiting,
};
use crate::health::Live;

/// Who writes these statuses, for messages.
const FRAMEWORK: &str = "the governance policy framework";

/// The entries of a list at a path, as mappings.
fn entries<'a>(obj: &'a Live, path: &[&str]) -> Vec<&'a Map<String, Value>> {
    value(obj, path)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_object).collect())
        .unwrap_or_default()
}

/// Open Cluster Management Policy, root (on the hub: `status.status`, one entry per cluster,
/// and `status.placement`) or replicated (in a cluster's namespace: `status.details`, one entry
/// per policy template): `spec.disabled` is `Suspended` (not propagated on purpose);
/// `status.compliant` `Compliant` is `Healthy`, `NonCompliant` `Degraded` (naming the clusters
/// or templates that are not compliant, with a template's latest history message), `Pending`
/// `Progressing` (a template waits for its dependencies); a root policy with placements but no
/// cluster and no compliance is `Healthy` (it selects no cluster: nothing to comply, as
/// `CalculateRootCompliance` leaves the state empty); no compliance yet (a cluster has not
/// reported) and no status are `Progressing`.
///
/// Follows open-cluster-management-io/governance-policy-propagator `api/v1/policy_types.go`
/// (`ComplianceState`: `Compliant`, `NonCompliant`, `Pending`; `PolicyStatus`,
/// `CompliancePerClusterStatus`, `DetailsPerTemplate`, `PolicySpec.Disabled`) and
/// `controllers/common/common_status_update.go` (`CalculateRootCompliance`: NonCompliant >
/// Pending > unknown > Compliant).
///
/// Departs from Argo CD's checks: a disabled policy is `Suspended`, not `Healthy`; `Pending`
/// is `Progressing`, not `Degraded` (the framework holds the templates until the dependencies
/// are met; a dependency that fails shows as its own policy's `NonCompliant`).
pub(super) fn policy(obj: &Live) -> Assessment {
    if true_at(obj, &["spec", "disabled"]) {
        return verdict(
            Health::Suspended,
            "spec.disabled is true: the policy is not propagated",
        );
    }
    if status(obj).is_none() {
        return waiting(FRAMEWORK);
    }
    let clusters = entries(obj, &["status", "status"]);
    let details = entries(obj, &["status", "details"]);
    let compliant = str_at(obj, &["status", "compliant"]).unwrap_or("");
    let not = |want: &str| -> String {
        let mut names: Vec<String> = clusters
            .iter()
            .filter(|c| cstr(c, "compliant") != want)
            .map(|c| format!("cluster {}", cstr(c, "clustername")))
            .collect();
        for d in &details {
            if cstr(d, "compliant") == want {
                continue;
            }
            let name = d
                .get("templateMeta")
                .and_then(|m| m.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("?");
            let latest = d
                .get("history")
                .and_then(Value::as_array)
                .and_then(|h| h.first())
                .and_then(|h| h.get("message"))
                .and_then(Value::as_str)
                .map(|m| format!(" ({})", m.trim()))
                .unwrap_or_default();
            names.push(format!("template {name}{latest}"));
        }
        names.join(", ")
    };
    let with = |head: String, list: String| {
        if list.is_empty() {
            head
        } else {
            format!("{head}: {list}")
        }
    };
    match compliant {
        "NonCompliant" => verdict(
            Health::Degraded,
            with("status.compliant is NonCompliant".into(), not("Compliant")),
        ),
        "Pending" => verdict(
            Health::Progressing,
            with(
                "status.compliant is Pending: waiting for the policy's dependencies".into(),
                not("Compliant"),
            ),
        ),
        "Compliant" => verdict(
            Health::Healthy,
            if clusters.is_empty() {
                "status.compliant is Compliant".to_string()
            } else {
                format!("status.compliant is Compliant: {} clusters", clusters.len())
            },
        ),
        "" if clusters.is_empty() && !entries(obj, &["status", "placement"]).is_empty() => verdict(
            Health::Healthy,
            "no cluster is selected by the policy's placements (status.placement)",
        ),
        "" => verdict(
            Health::Progressing,
            with(
                format!("waiting for {FRAMEWORK} to report compliance"),
                not("Compliant"),
            ),
        ),
        other => verdict(
            Health::Unknown,
            format!("status.compliant is {other} (none of Compliant, NonCompliant, Pending)"),
        ),
    }
}

/// The reason of a ConfigurationPolicy template condition when pruning its objects failed.
const CLEANUP_ERROR: &str = "Error cleaning up child objects";

/// Open Cluster Management ConfigurationPolicy and CertificatePolicy: a template's cleanup
/// error (reason "Error cleaning up child objects", which also sets `Terminating`) is
/// `Degraded`; then `status.lastEvaluatedGeneration` behind `metadata.generation` is
/// `Progressing` (the compliance is of an older spec); `status.compliant` `NonCompliant` is
/// `Degraded` (with the `violation` messages of `status.compliancyDetails`, a list of templates
/// for ConfigurationPolicy, a map of namespaces for CertificatePolicy), `Compliant` `Healthy`,
/// `Terminating` `Progressing` (being deleted, its objects pruned), none yet `Progressing`; no
/// status is `Progressing`. `status.relatedObjects[].compliant` is each object's part, not the
/// policy's verdict: the templates' compliance already decides it.
///
/// Follows open-cluster-management-io/config-policy-controller
/// `api/v1/configurationpolicy_types.go` (`ComplianceState`: `Compliant`, `NonCompliant`,
/// `Terminating`, `UnknownCompliancy`; `ConfigurationPolicyStatus`, `TemplateStatus`,
/// `Condition` of type `violation`/`notification`, `RelatedObject`) and
/// `controllers/configurationpolicy_controller.go` (`reasonCleanupError`, how the overall
/// state follows the templates'); stolostron/cert-policy-controller
/// `api/v1/certificatepolicy_types.go` (`CertificatePolicyStatus`, `CompliancyDetails`).
pub(super) fn configuration_policy(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return waiting(FRAMEWORK);
    }
    let details = value(obj, &["status", "compliancyDetails"]);
    // ConfigurationPolicy: a list of templates, each with conditions; CertificatePolicy: a map
    // of namespaces, each with a message.
    let mut violations: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mut cleanup = None;
    match details {
        Some(Value::Array(templates)) => {
            for t in templates {
                for c in super::conditions_in(t.get("conditions")) {
                    let m = cstr(c, "message").trim().to_string();
                    if cstr(c, "reason") == CLEANUP_ERROR {
                        cleanup.get_or_insert_with(|| format!("{CLEANUP_ERROR}: {m}"));
                    }
                    if m.is_empty() {
                        continue;
                    }
                    if cstr(c, "type") == "violation" {
                        violations.push(m);
                    } else {
                        notes.push(m);
                    }
                }
            }
        }
        Some(Value::Object(namespaces)) => {
            for (ns, d) in namespaces {
                let n = d
                    .get("nonCompliantCertificates")
                    .or_else(|| d.get("NonCompliantCertificates"))
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                let m = d
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .trim();
                let line = m.lines().next().unwrap_or("").trim();
                if n > 0 {
                    violations.push(format!("{ns}: {line}"));
                }
            }
        }
        _ => {}
    }
    if let Some(c) = cleanup {
        return verdict(Health::Degraded, c);
    }
    if let Some((seen, generation)) = generation_behind(obj, &["status", "lastEvaluatedGeneration"])
    {
        return verdict(
            Health::Progressing,
            format!(
                "waiting for generation {generation} to be evaluated (status.lastEvaluatedGeneration is {seen})"
            ),
        );
    }
    let with = |head: &str, list: &[String]| {
        if list.is_empty() {
            head.to_string()
        } else {
            format!("{head}: {}", list.join("; "))
        }
    };
    match str_at(obj, &["status", "compliant"]).unwrap_or("") {
        "NonCompliant" => verdict(
            Health::Degraded,
            with("status.compliant is NonCompliant", &violations),
        ),
        "Compliant" => verdict(
            Health::Healthy,
            with("status.compliant is Compliant", &notes),
        ),
        "Terminating" => verdict(
            Health::Progressing,
            "status.compliant is Terminating: the policy is being deleted",
        ),
        "" => verdict(
            Health::Progressing,
            format!("waiting for {FRAMEWORK} to evaluate the policy"),
        ),
        other => verdict(
            Health::Unknown,
            format!("status.compliant is {other} (none of Compliant, NonCompliant, Terminating)"),
        ),
    }
}

/// Open Cluster Management OperatorPolicy: `status.observedGeneration` behind is `Progressing`;
/// `ValidPolicySpec=False` is `Degraded`; the `Compliant` condition `True` is `Healthy`, `False`
/// (`NonCompliant`: the Subscription, OperatorGroup, CSV, InstallPlan, catalog or deployments
/// do not match, listed in its message) is `Degraded`; without it, `status.compliant`
/// `NonCompliant` is `Degraded` and anything else `Progressing` (`updateComplianceCondition`
/// writes the condition and `status.compliant` together: a `Compliant` without the condition
/// is not the controller's verdict yet); no status is `Progressing`.
///
/// Follows open-cluster-management-io/config-policy-controller
/// `api/v1beta1/operatorpolicy_types.go` (`OperatorPolicyStatus`: `compliant`,
/// `observedGeneration`, `conditions`) and `controllers/operatorpolicy_status.go`
/// (`compliantConditionType`, `validPolicyConditionType`, `updateComplianceCondition`,
/// `calculateComplianceCondition`).
pub(super) fn operator_policy(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return waiting(FRAMEWORK);
    }
    if let Some(a) = generation_lag(obj) {
        return a;
    }
    let conds = conditions(obj);
    if let Some(c) = find(&conds, "ValidPolicySpec")
        && state(c) == "False"
    {
        return verdict(Health::Degraded, say(c));
    }
    match find(&conds, "Compliant") {
        Some(c) if state(c) == "True" => verdict(Health::Healthy, say(c)),
        Some(c) if state(c) == "False" => verdict(Health::Degraded, say(c)),
        Some(c) => verdict(Health::Progressing, say(c)),
        None => match str_at(obj, &["status", "compliant"]).unwrap_or("") {
            "NonCompliant" => verdict(Health::Degraded, "status.compliant is NonCompliant"),
            _ => verdict(
                Health::Progressing,
                format!("waiting for {FRAMEWORK} to set the Compliant condition"),
            ),
        },
    }
}
