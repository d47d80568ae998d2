//! GitOps Promoter (`promoter.argoproj.io`, argoproj-labs/gitops-promoter): every kind whose
//! controller writes a status.
//!
//! Every controller of the promoter writes its status through one function,
//! `HandleReconciliationResult` (`internal/utils/utils.go`): a `Ready` condition of the
//! generation it reconciled, `True` with reason `ReconciliationSuccess`, or `False` with reason
//! `ReconciliationError` and the error; then `status.observedGeneration`. A parent whose
//! children are not ready (`InheritNotReadyConditionFromObjects`, same file) copies the child's
//! status into its own `Ready` with reason `ChangeTransferPolicyNotReady`,
//! `PreviousEnvironmentCommitStatusNotReady`, `PullRequestNotReady` or `CommitStatusesNotReady`
//! (`internal/types/conditions/conditions.go`): `Unknown` while a child has no `Ready` of its
//! own generation yet, `False` only when the child's is `False`, that is when a reconciliation
//! failed somewhere below. So `Ready=False` is a failure whatever its reason, and
//! `Ready=Unknown` is waiting.

use serde_json::{Map, Value};

use super::super::{Assessment, Health, conditions_in, cstr};
use super::{
    Cond, conditions, find, generation_lag, say, stale, stale_condition, state, status, str_at,
    value, verdict, waiting,
};
use crate::health::Live;

/// Who writes the status, for messages.
const PROMOTER: &str = "GitOps Promoter";

/// The Kubernetes API server's message for a write that lost an optimistic-concurrency race
/// (`OptimisticLockErrorMsg`, k8s.io/apiserver `pkg/registry/generic/registry/store.go`).
const CONFLICT: &str = "the object has been modified";

/// The rule for a GitOps Promoter kind, `None` for a kind with no status (RevertCommit, a
/// scaffold) or one this rule does not know.
pub(super) fn assess(obj: &Live) -> Option<Assessment> {
    Some(match obj.kind() {
        "PromotionStrategy" => promotion_strategy(obj),
        "ChangeTransferPolicy" => change_transfer_policy(obj),
        "PullRequest" => pull_request(obj),
        "CommitStatus" => commit_status(obj),
        "ArgoCDCommitStatus" => argocd_commit_status(obj),
        "GitCommitStatus"
        | "TimedCommitStatus"
        | "WebRequestCommitStatus"
        | "ScheduledCommitStatus" => gate(obj),
        "GitRepository" | "ScmProvider" | "ClusterScmProvider" => configuration(obj),
        "ControllerConfiguration" => controller_configuration(obj),
        _ => return None,
    })
}

/// The verdict of a promoter object's `Ready` condition: `Ok` with the condition when it is
/// `True` for the current generation (the kind's own reading comes next), `Err` with the verdict
/// otherwise.
///
/// No status, or no `Ready` yet, is `Progressing`: the controller has not reconciled the object.
/// `Ready=False` of the current generation is `Degraded` (see the module's doc), except when the
/// error is a write conflict, which the promoter calls expected and transient (it emits no
/// event for it, `HandleReconciliationResult`) and retries at once: `Progressing`. Then
/// `status.observedGeneration` or the condition's `observedGeneration` behind
/// `metadata.generation` is `Progressing` (the promoter keeps the top-level one at the last
/// successful full status write: the "status is stale" signal), and so is `Ready=Unknown`.
///
/// Argo CD's checks (`resource_customizations/promoter.argoproj.io/*/health.lua`) differ in two
/// places: the PromotionStrategy's, ChangeTransferPolicy's, PullRequest's, CommitStatus's and
/// ArgoCDCommitStatus's read `Ready=Unknown` as they read `True` (here it is `Progressing`: the
/// promoter writes it only while a child is not ready yet), and every one reads a write conflict
/// as `Degraded`.
fn reconciled(obj: &Live) -> Result<&Cond, Assessment> {
    if status(obj).is_none() {
        return Err(waiting(PROMOTER));
    }
    let conds = conditions(obj);
    let ready = find(&conds, "Ready");
    if let Some(c) = ready
        && state(c) == "False"
        && !stale(obj, c)
    {
        return Err(if cstr(c, "message").contains(CONFLICT) {
            verdict(
                Health::Progressing,
                format!("{} (a write conflict, retried by the controller)", say(c)),
            )
        } else {
            verdict(Health::Degraded, say(c))
        });
    }
    if let Some(a) = generation_lag(obj) {
        return Err(a);
    }
    match ready {
        None => Err(verdict(
            Health::Progressing,
            format!("waiting for {PROMOTER} to set the Ready condition"),
        )),
        Some(c) if stale(obj, c) => Err(stale_condition(obj, c)),
        Some(c) if state(c) == "True" => Ok(c),
        Some(c) if state(c) == "Unknown" => Err(verdict(Health::Progressing, say(c))),
        Some(c) => Err(verdict(
            Health::Unknown,
            format!("{} (a status none of True, False, Unknown)", say(c)),
        )),
    }
}

/// GitRepository, ScmProvider and ClusterScmProvider: their controllers validate the object
/// (the provider's secret, the repository's provider) and write `Ready` (since promoter v0.17.0;
/// before it they wrote no status). Read by [`reconciled`] alone: `Ready=True` is `Healthy`.
///
/// Follows gitops-promoter `internal/controller/gitrepository_controller.go`,
/// `scmprovider_controller.go`, `clusterscmprovider_controller.go` and `internal/utils/utils.go`
/// (`HandleReconciliationResult`).
fn configuration(obj: &Live) -> Assessment {
    match reconciled(obj) {
        Ok(c) => verdict(Health::Healthy, say(c)),
        Err(a) => a,
    }
}

/// ControllerConfiguration: the promoter's settings, read by every controller whatever its
/// status. Since v0.34.0 the controller of the install's namespace writes `Ready` for it (and
/// restarts when `spec.instanceID` changed), read by [`reconciled`]; one with no status at all
/// is `Healthy`, since the promoter before v0.34.0, and any namespace but the controller's,
/// never writes one.
///
/// Follows gitops-promoter `api/v1alpha1/controllerconfiguration_types.go` and
/// `internal/controller/controllerconfiguration_controller.go`.
fn controller_configuration(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return verdict(
            Health::Healthy,
            "ControllerConfiguration holds settings (no status before promoter v0.34.0)",
        );
    }
    configuration(obj)
}

/// CommitStatus: a commit status the promoter sets on a commit in the SCM. Its
/// `spec.phase`/`status.phase` (`pending`, `success`, `failure`) is the status it *reports* on
/// `status.sha`, a verdict decided elsewhere (by a [`gate`], which shows it, or by whatever
/// writes the CommitStatus), not the object's health: once reconciled
/// ([`reconciled`]: `Ready=False` is a failure to set it in the SCM) it is `Healthy` whatever
/// the phase, and the message names the phase.
///
/// Argo CD's check agrees (`promoter.argoproj.io/CommitStatus/health.lua`).
///
/// Follows gitops-promoter `api/v1alpha1/commitstatus_types.go` (`CommitStatusPhase`) and
/// `internal/controller/commitstatus_controller.go`.
fn commit_status(obj: &Live) -> Assessment {
    let ready = match reconciled(obj) {
        Ok(c) => c,
        Err(a) => return a,
    };
    match (
        str_at(obj, &["status", "phase"]).filter(|p| !p.is_empty()),
        str_at(obj, &["status", "sha"]).filter(|s| !s.is_empty()),
    ) {
        (Some(phase), Some(sha)) => verdict(
            Health::Healthy,
            format!("reports {phase} on commit {} to the SCM", short(sha)),
        ),
        _ => verdict(Health::Healthy, say(ready)),
    }
}

/// The gates that decide a commit status per environment: GitCommitStatus (an expression on
/// the commit), TimedCommitStatus (a soak time), WebRequestCommitStatus (an HTTP check) and
/// ScheduledCommitStatus (deployment windows). Read by [`reconciled`] (errors, such as a
/// PromotionStrategy that does not exist, are `Ready=False`); then by the phase each writes per
/// environment branch, `status.environments[].phase` or (a WebRequestCommitStatus of context
/// `promotionstrategy`) `status.promotionStrategyContext.phasePerBranch[].phase`: the gate's own
/// verdict, which its CommitStatus relays to the SCM. A `failure` (the expression evaluated to
/// false, the web check answered failure) is `Degraded`: the gate found the commit failing and
/// holds its promotion; `pending` (soaking, waiting for an approval, outside a window) is
/// `Progressing`; `success` everywhere, or no environment yet, is `Healthy`. The message lists
/// every branch's phase.
///
/// Unlike a [`commit_status`], which only relays a phase decided elsewhere, a gate's phase is
/// what its own status says of the commit, so a `failure` is never `Healthy` here; the same
/// reading as Argo CD's checks (`promoter.argoproj.io/*CommitStatus/health.lua`), which have
/// none for ScheduledCommitStatus.
///
/// Follows gitops-promoter `api/v1alpha1/gitcommitstatus_types.go` (`Phase`: "failure:
/// expression evaluated to false"), `timedcommitstatus_types.go`, `webrequestcommitstatus_types.go`
/// (`Phase`, `PhasePerBranch`), `scheduledcommitstatus_types.go` and
/// `internal/controller/gitcommitstatus_controller.go` (`evaluateExpression`).
fn gate(obj: &Live) -> Assessment {
    let ready = match reconciled(obj) {
        Ok(c) => c,
        Err(a) => return a,
    };
    let mut phases: Vec<(&str, &str)> = Vec::new();
    for list in [
        &["status", "environments"][..],
        &["status", "promotionStrategyContext", "phasePerBranch"],
    ] {
        for e in conditions_in(value(obj, list)) {
            phases.push((cstr(e, "branch"), cstr(e, "phase")));
        }
    }
    if phases.is_empty() {
        return verdict(Health::Healthy, say(ready));
    }
    let health = if phases.iter().any(|(_, p)| *p == "failure") {
        Health::Degraded
    } else if phases.iter().any(|(_, p)| *p != "success") {
        Health::Progressing
    } else {
        Health::Healthy
    };
    let list = phases
        .iter()
        .map(|(b, p)| format!("{b} {}", if p.is_empty() { "pending" } else { p }))
        .collect::<Vec<_>>();
    verdict(health, format!("reports {}", list.join(", ")))
}

/// ArgoCDCommitStatus: reports the health of the Argo CD Applications its
/// `spec.applicationSelector` selects, one CommitStatus per environment. Read by
/// [`reconciled`]; then an empty `status.applicationsSelected` is `Degraded`: it selects no
/// Application, so it gates nothing (since promoter v0.23.0 the controller fails the
/// reconciliation with "no Argo CD Applications found matching selector"; before, it reported
/// `Ready=True` with no application); otherwise `Healthy`, whatever the applications' phases:
/// they relay the Argo CD Applications' health (`success` when every one of an environment is
/// `Healthy` on the branch's commit, `failure` when every one is `Degraded`), which the
/// Applications show themselves; the message names those not `success`. Argo CD's check reads
/// it the same way.
///
/// Follows gitops-promoter `api/v1alpha1/argocdcommitstatus_types.go`
/// (`ApplicationsSelected`) and `internal/controller/argocdcommitstatus_controller.go`.
fn argocd_commit_status(obj: &Live) -> Assessment {
    let ready = match reconciled(obj) {
        Ok(c) => c,
        Err(a) => return a,
    };
    let apps = conditions_in(value(obj, &["status", "applicationsSelected"]));
    if apps.is_empty() {
        return verdict(
            Health::Degraded,
            "status.applicationsSelected is empty: spec.applicationSelector selects no Argo CD Application",
        );
    }
    let not_success = apps
        .iter()
        .filter(|a| cstr(a, "phase") != "success")
        .map(|a| format!("{} {}", cstr(a, "name"), cstr(a, "phase")))
        .collect::<Vec<_>>();
    let mut message = format!("{}; {} application(s) selected", say(ready), apps.len());
    if !not_success.is_empty() {
        message.push_str(&format!(" (reporting {})", not_success.join(", ")));
    }
    verdict(Health::Healthy, message)
}

/// PullRequest: a pull request the promoter opens, merges or closes in the SCM. Read by
/// [`reconciled`] (`Ready=False`: the SCM refused, e.g. a merge blocked by branch protection);
/// then `status.state` behind `spec.state` (asked to merge or close, not done yet) is
/// `Progressing`; otherwise `Healthy`: open, or merged or closed (by the promoter, or outside it:
/// `status.externallyMergedOrClosed`), in which case the controller deletes the object next.
///
/// Argo CD's check reads every reconciled PullRequest as `Healthy`.
///
/// Follows gitops-promoter `api/v1alpha1/pullrequest_types.go` (`PullRequestState`,
/// `ExternallyMergedOrClosed`) and `internal/controller/pullrequest_controller.go`
/// (`cleanupTerminalStates`, `handleStateTransitions`).
fn pull_request(obj: &Live) -> Assessment {
    let ready = match reconciled(obj) {
        Ok(c) => c,
        Err(a) => return a,
    };
    let current = str_at(obj, &["status", "state"]).unwrap_or("");
    let wanted = str_at(obj, &["spec", "state"]).unwrap_or("");
    let id = str_at(obj, &["status", "id"]).unwrap_or("");
    if value(obj, &["status", "externallyMergedOrClosed"]).and_then(Value::as_bool) == Some(true) {
        return verdict(
            Health::Healthy,
            "status.externallyMergedOrClosed is true: merged or closed outside the promoter (to be deleted)",
        );
    }
    if !current.is_empty() && !wanted.is_empty() && current != wanted {
        return verdict(
            Health::Progressing,
            format!(
                "status.state is {current}, spec.state is {wanted}: waiting for the pull request to be {wanted}"
            ),
        );
    }
    match current {
        "" => verdict(Health::Healthy, say(ready)),
        "open" if !id.is_empty() => {
            verdict(Health::Healthy, format!("status.state is open (#{id})"))
        }
        s => verdict(Health::Healthy, format!("status.state is {s}")),
    }
}

/// ChangeTransferPolicy: promotes one environment, from its proposed branch (`<branch>-next`,
/// written by the hydrator) to its active branch, through a PullRequest merged once the proposed
/// commit statuses succeed. Read by [`reconciled`]; then a dry SHA missing ([`missing_sha`]), or
/// the proposed dry commit not yet the active one ([`promotion`]: a promotion under way, waiting
/// for its commit statuses or its pull request), is `Progressing`; otherwise `Healthy`, and the message
/// names the active commit statuses that are not `success` (the health of what runs, reported by
/// its gates: the promotion is done).
///
/// Follows gitops-promoter `api/v1alpha1/changetransferpolicy_types.go` (`CommitBranchState`,
/// `HydratorMetadata`) and `internal/controller/changetransferpolicy_controller.go`
/// (`calculateStatus`, `validateProposedDryMetadata`, `createOrUpdatePullRequest`: a pull request
/// only when the proposed dry SHA differs from the active one).
fn change_transfer_policy(obj: &Live) -> Assessment {
    if let Err(a) = reconciled(obj) {
        return a;
    }
    let Some(st) = status(obj) else {
        return waiting(PROMOTER);
    };
    let branch = str_at(obj, &["spec", "activeBranch"]).unwrap_or("the active branch");
    if let Some(a) = missing_sha(st, "status", branch).or_else(|| promotion(st, branch)) {
        return a;
    }
    verdict(
        Health::Healthy,
        format!(
            "{branch} is on dry commit {}{}",
            short(dry(st, "active")),
            failing_active(st, branch)
        ),
    )
}

/// PromotionStrategy: promotes each dry commit through `spec.environments` in order, one
/// ChangeTransferPolicy per environment, whose state it copies to `status.environments[]`.
/// Read by [`reconciled`] (`Ready=False` with reason `ChangeTransferPolicyNotReady` or
/// `PreviousEnvironmentCommitStatusNotReady` is a child's failure); then an empty
/// `status.environments` is `Degraded` (the controller lists every environment of the spec,
/// which requires at least one: there is nothing to promote through); an environment with a
/// dry SHA missing, environments whose proposed dry SHAs differ (the hydrator has not written
/// every proposed branch yet: the controller itself re-reconciles the ChangeTransferPolicies
/// that lag, `enqueueOutOfSyncCTPs`), or one whose proposed dry commit is not yet active
/// ([`promotion`]) is `Progressing`; otherwise `Healthy`: every environment is on its proposed
/// dry commit, and the message names the active commit statuses that are not `success`.
///
/// The proposed dry SHA is the hydrator's git note's (`proposed.note.drySha`) when there is
/// one, as the controller reads it; a note ahead of the proposed branch's `hydrator.metadata`
/// alone (a hydration that changed nothing) is no promotion.
///
/// Follows gitops-promoter `api/v1alpha1/promotionstrategy_types.go` (`EnvironmentStatus`,
/// `environments` `MinItems=1`) and `internal/controller/promotionstrategy_controller.go`
/// (`calculateStatus`, `enqueueOutOfSyncCTPs`).
fn promotion_strategy(obj: &Live) -> Assessment {
    if let Err(a) = reconciled(obj) {
        return a;
    }
    let envs = conditions_in(value(obj, &["status", "environments"]));
    if envs.is_empty() {
        return verdict(
            Health::Degraded,
            "status.environments is empty: no environment to promote through",
        );
    }
    for (i, e) in envs.iter().enumerate() {
        let path = format!("status.environments[{i}]");
        if let Some(a) = missing_sha(e, &path, cstr(e, "branch")) {
            return a;
        }
    }
    let first = proposed_dry(envs[0]);
    if envs.iter().any(|e| proposed_dry(e) != first) {
        let shas = envs
            .iter()
            .map(|e| format!("{} {}", cstr(e, "branch"), short(proposed_dry(e))))
            .collect::<Vec<_>>();
        return verdict(
            Health::Progressing,
            format!(
                "environments have different proposed dry commits ({}): waiting for the hydrator",
                shas.join(", ")
            ),
        );
    }
    if let Some(a) = envs.iter().find_map(|e| promotion(e, cstr(e, "branch"))) {
        return a;
    }
    let failing: String = envs
        .iter()
        .map(|e| failing_active(e, cstr(e, "branch")))
        .collect();
    verdict(
        Health::Healthy,
        format!(
            "{} environment(s) on dry commit {}{failing}",
            envs.len(),
            short(dry(envs[0], "active"))
        ),
    )
}

// ---------------------------------------------------------------------------------------------
// Reading `CommitBranchState`s.

/// The `dry.sha` of a branch (`active` or `proposed`) of an environment's state.
fn dry<'a>(env: &'a Map<String, Value>, side: &str) -> &'a str {
    env.get(side)
        .and_then(|b| b.get("dry"))
        .and_then(|d| d.get("sha"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The proposed dry SHA as the controller reads it: the git note's when there is one, the
/// proposed branch's `hydrator.metadata` otherwise.
fn proposed_dry(env: &Map<String, Value>) -> &str {
    env.get("proposed")
        .and_then(|b| b.get("note"))
        .and_then(|n| n.get("drySha"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| dry(env, "proposed"))
}

/// `Progressing` when an environment's active or proposed dry SHA is missing: the hydrator has
/// not written that branch's `hydrator.metadata` yet.
fn missing_sha(env: &Map<String, Value>, path: &str, branch: &str) -> Option<Assessment> {
    if dry(env, "active").is_empty() {
        return Some(verdict(
            Health::Progressing,
            format!("{path}.active.dry.sha is empty: waiting for a hydrated commit on {branch}"),
        ));
    }
    if proposed_dry(env).is_empty() {
        return Some(verdict(
            Health::Progressing,
            format!(
                "{path}.proposed.dry.sha is empty: waiting for the hydrator to write {branch}'s proposed branch"
            ),
        ));
    }
    None
}

/// `Progressing` when an environment's proposed dry commit is not its active one: a promotion
/// under way; the message names the proposed commit statuses that hold it (`pending`,
/// `failure`).
fn promotion(env: &Map<String, Value>, branch: &str) -> Option<Assessment> {
    let (active, proposed) = (dry(env, "active"), dry(env, "proposed"));
    if proposed.is_empty() || proposed == active {
        return None;
    }
    let waiting_on = not_success(env, "proposed");
    let mut message = format!(
        "promoting dry commit {} to {branch} (active {})",
        short(proposed),
        short(active)
    );
    if !waiting_on.is_empty() {
        message.push_str(&format!(
            ": proposed commit statuses {}",
            waiting_on.join(", ")
        ));
    }
    Some(verdict(Health::Progressing, message))
}

/// `; active commit statuses of BRANCH: KEY PHASE, ...` for the active commit statuses that are
/// not `success`, or nothing.
fn failing_active(env: &Map<String, Value>, branch: &str) -> String {
    let list = not_success(env, "active");
    if list.is_empty() {
        String::new()
    } else {
        format!("; active commit statuses of {branch}: {}", list.join(", "))
    }
}

/// `KEY PHASE` for each commit status of a branch whose phase is not `success`.
fn not_success(env: &Map<String, Value>, side: &str) -> Vec<String> {
    conditions_in(env.get(side).and_then(|b| b.get("commitStatuses")))
        .into_iter()
        .filter(|s| cstr(s, "phase") != "success")
        .map(|s| format!("{} {}", cstr(s, "key"), cstr(s, "phase")))
        .collect()
}

/// The first seven characters of a SHA, as the promoter shows them (`DryShaShort`).
fn short(sha: &str) -> &str {
    sha.get(..7).unwrap_or(sha)
}
