//! An app's status as a pure function of what the reconcile found and the time: the sync
//! status, the health, the gap (`outOfSyncSince`), the progress clock and every condition.
//!
//! No I/O and no clock reads: [`compute`] takes the facts ([`Facts`]), the clocks it keeps
//! between passes ([`Clocks`]) and `now`, so the rules for deadlines, staleness, windows and
//! fights are unit-tested with a fixed clock (below). The rules are the README's "Status" and
//! "Time" sections:
//!
//! - `Ready` follows the worst condition: a source or manifest problem, a failed sync, an
//!   ownership conflict, a blocked prune, a holding sync window, a passed progress deadline, drift,
//!   then health; `Synced` only when none applies.
//! - `lastTransitionTime` moves exactly when a condition's status or reason changes
//!   ([`set_condition`]).
//! - The gap opens when the app stops being Synced and closes when it is Synced again; a gap
//!   reopened while another writer keeps changing an object back keeps its first start; a source
//!   outage alone opens none.
//! - The progress clock runs while the app is neither Synced nor Healthy, not while a sync window
//!   holds it, nor during a source outage alone.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::health::{self, Health};
use crate::object::{ObjectKey, Revision};
use crate::status::{
    AppStatus, ConditionType, Reason, SyncStatus, count, remove_condition, set_condition,
};
use crate::window;

/// Why the newest revision is not in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The source could not be fetched.
    Source {
        /// `RefNotFound`, `Timeout`, `AuthenticationFailed`, `HostKeyMismatch`, `Unreachable`
        /// or `FetchFailed`.
        reason: Reason,
        /// What failed, for people.
        message: String,
    },
    /// The newest revision cannot be applied: `InvalidManifest`, `PathNotFound`,
    /// `SignatureRejected`.
    Invalid {
        /// Which.
        reason: Reason,
        /// What is wrong, for people.
        message: String,
    },
    /// The newest revision is valid but declares nothing, and applying it would prune every
    /// object of the app (`allowEmpty` is off).
    Blocked {
        /// What is held, for people.
        message: String,
    },
}

/// The object another writer keeps changing back, for the `Contested` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contest {
    /// The first object fought over.
    pub key: ObjectKey,
    /// The fields changed back.
    pub fields: Vec<String>,
    /// How many times it was reverted.
    pub reverts: u32,
    /// When its next revert may run.
    pub next_revert: SystemTime,
    /// How many objects are fought over.
    pub objects: usize,
}

/// What a reconcile found, as [`compute`] needs it.
#[derive(Clone, Debug)]
pub struct Facts<'a> {
    /// The revision in force and how many objects it declares.
    pub in_force: Option<(&'a Revision, usize)>,
    /// The revision applied whole (the inventory's).
    pub applied: Option<&'a Revision>,
    /// The newest revision tried.
    pub last_attempted: Option<&'a Revision>,
    /// Why the newest revision is not in force.
    pub problem: Option<&'a Problem>,
    /// Why the last write to the store failed.
    pub sync_error: Option<&'a str>,
    /// Objects declared here but owned by another app: key → owner.
    pub conflicts: &'a BTreeMap<ObjectKey, String>,
    /// Why a prune was held back.
    pub prune_blocked: Option<&'a str>,
    /// The sync windows' state, when the app has windows.
    pub window: Option<&'a window::State>,
    /// `sync.selfHeal`.
    pub self_heal: bool,
    /// `sync.progressDeadline`.
    pub progress_deadline: Duration,
    /// `sync.staleAfter`.
    pub stale_after: Option<Duration>,
    /// True after a failed reconcile not yet followed by a good one (retries back off).
    pub failing: bool,
    /// What the last good fetch said (`fetched refs/heads/main at ...`).
    pub source_message: Option<&'a str>,
    /// Another writer keeps changing an object back.
    pub contest: Option<Contest>,
}

/// What [`compute`] keeps between passes besides the status itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Clocks {
    /// When the app started converging without having converged since.
    pub progressing_since: Option<SystemTime>,
    /// The start of the gap a revert closed last, while a fight is on: the gap reopened by the
    /// other writer keeps that start, so a persistent fight grows one gap (and `staleAfter`
    /// fires) instead of a new one after every brief revert.
    pub fight_gap_start: Option<String>,
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

fn secs(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

/// The condition reason for a health: its name.
pub fn health_reason(h: Health) -> Reason {
    match h {
        Health::Healthy => Reason::Healthy,
        Health::Suspended => Reason::Suspended,
        Health::Progressing => Reason::Progressing,
        Health::Missing => Reason::Missing,
        Health::Degraded => Reason::Degraded,
        Health::Unknown => Reason::Unknown,
    }
}

/// Computes `status` (whose `resources` and `diagnostics` are already current) from `facts`
/// at `now`: revisions, sync status, health, the gap, the progress clock and every condition.
/// Conditions keep their `lastTransitionTime` unless their status or reason changes.
pub fn compute(status: &mut AppStatus, facts: &Facts, clocks: &mut Clocks, now: SystemTime) {
    let now_s = rfc3339(now);
    let s = status;
    s.revision = facts.applied.map(|r| r.0.clone());
    s.last_attempted_revision = facts
        .last_attempted
        .or(facts.in_force.map(|(r, _)| r))
        .map(|r| r.0.clone());
    let out_of_sync = s
        .resources
        .iter()
        .filter(|r| r.sync != SyncStatus::Synced)
        .count();
    let unknown = matches!(
        facts.problem,
        Some(Problem::Source { .. } | Problem::Invalid { .. })
    ) || facts.in_force.is_none()
        || facts.sync_error.is_some();
    let blocked = matches!(facts.problem, Some(Problem::Blocked { .. }));
    let pending_revision = facts
        .in_force
        .is_some_and(|(r, _)| facts.applied != Some(r));
    s.sync = if unknown {
        SyncStatus::Unknown
    } else if blocked || out_of_sync > 0 || pending_revision {
        SyncStatus::OutOfSync
    } else {
        SyncStatus::Synced
    };
    s.health = if facts.in_force.is_none() {
        Health::Unknown
    } else {
        health::worst(s.resources.iter().map(|r| r.health))
    };
    // Only the source is down: the store matches the revision in force.
    let outage_only = s.sync == SyncStatus::Unknown
        && matches!(facts.problem, Some(Problem::Source { .. }))
        && facts.sync_error.is_none()
        && facts.in_force.is_some()
        && out_of_sync == 0
        && !pending_revision;
    let fighting = facts.contest.is_some();
    if !fighting {
        clocks.fight_gap_start = None;
    }
    match s.sync {
        SyncStatus::Synced => {
            if let Some(start) = s.out_of_sync_since.take()
                && fighting
            {
                clocks.fight_gap_start.get_or_insert(start);
            }
        }
        // A source outage alone opens no gap: the store still matches the last revision
        // fetched, and not knowing of a newer one is not drift (SourceAvailable=False says the
        // source is down; a gap already open stays open).
        SyncStatus::Unknown if outage_only => {}
        _ => {
            if s.out_of_sync_since.is_none() {
                s.out_of_sync_since = Some(
                    clocks
                        .fight_gap_start
                        .clone()
                        .unwrap_or_else(|| now_s.clone()),
                );
            }
        }
    }
    // The worst object and why, for messages.
    let worst_object = s
        .resources
        .iter()
        .filter(|r| r.health == s.health && s.health != Health::Healthy)
        .map(|r| {
            let why = r.health_message.as_deref().unwrap_or("");
            if why.is_empty() {
                r.key().to_string()
            } else {
                format!("{}: {why}", r.key())
            }
        })
        .next()
        .unwrap_or_default();
    // Convergence: synced and healthy (or deliberately suspended), with nothing failing. A
    // source outage alone does not start the progress clock either.
    let converged = (s.sync == SyncStatus::Synced || outage_only)
        && matches!(s.health, Health::Healthy | Health::Suspended)
        && facts.conflicts.is_empty();
    let held = facts
        .window
        .filter(|w| !w.automatic && (out_of_sync > 0 || pending_revision));
    // Time a sync window holds the app back is not time spent converging: the deadline counts
    // from when the window lets the sync through (Argo CD counts no held time).
    if converged || facts.in_force.is_none() || held.is_some() {
        clocks.progressing_since = None;
    } else if clocks.progressing_since.is_none() {
        clocks.progressing_since = Some(now);
    }
    s.progressing_since = clocks.progressing_since.map(rfc3339);
    let deadline = facts.progress_deadline;
    let progressing_for = clocks
        .progressing_since
        .map(|t| now.duration_since(t).unwrap_or_default());
    let deadline_exceeded = progressing_for.is_some_and(|d| d > deadline);
    let gap = s
        .out_of_sync_since
        .as_deref()
        .and_then(|t| humantime::parse_rfc3339(t).ok())
        .map(|t| now.duration_since(t).unwrap_or_default());
    // A gap a sync window holds open on purpose is not an incident: no Stale while held (the
    // gap's age still counts, and is judged again when the window lets the sync through).
    let stale = facts
        .stale_after
        .filter(|_| held.is_none())
        .and_then(|limit| gap.filter(|g| *g > limit).map(|_| limit));
    // Messages name instants, not ages: a message is written when something changes, and an
    // age in it would be stale the moment after.
    let since = s.progressing_since.clone().unwrap_or_default();

    // What the store is held to: the revision applied whole (the inventory's), not a newer one
    // whose sync failed.
    let enforcing = facts
        .applied
        .or(facts.in_force.map(|(r, _)| r))
        .map(|r| format!("; enforcing {}", r.short()))
        .unwrap_or_default();
    let (ready, reason, message) = if let Some(Problem::Source { message, .. }) = facts.problem {
        (
            false,
            Reason::SourceUnavailable,
            format!("{message}{enforcing}"),
        )
    } else if let Some(Problem::Invalid { reason, message }) = facts.problem {
        (false, reason.clone(), format!("{message}{enforcing}"))
    } else if let Some(Problem::Blocked { message }) = facts.problem {
        (false, Reason::PruneBlocked, format!("{message}{enforcing}"))
    } else if let Some(e) = facts.sync_error {
        (false, Reason::SyncFailed, format!("{e}{enforcing}"))
    } else if let Some((key, why)) = facts.conflicts.iter().next() {
        (
            false,
            Reason::OwnershipConflict,
            format!("{key} is {why}; {} conflict(s)", facts.conflicts.len()),
        )
    } else if let Some(why) = facts.prune_blocked {
        (false, Reason::PruneBlocked, why.to_string())
    } else if let Some(w) = held {
        (false, Reason::HeldBySyncWindow, w.message.clone())
    } else if deadline_exceeded {
        // The worst of the two: a gap past the deadline is an incident, not a transient.
        (
            false,
            Reason::ProgressDeadlineExceeded,
            format!(
                "not synced and healthy within progressDeadline {} (since {since}): {}",
                secs(deadline),
                what_holds_it_up(&worst_object, out_of_sync, pending_revision)
            ),
        )
    } else if out_of_sync > 0 || pending_revision {
        let why = if facts.self_heal {
            ""
        } else {
            " (detect-only: selfHeal is off)"
        };
        (
            false,
            Reason::OutOfSync,
            format!("{out_of_sync} object(s) differ from Git{why}"),
        )
    } else if !matches!(s.health, Health::Healthy | Health::Suspended) {
        (false, health_reason(s.health), worst_object.clone())
    } else if let Some((revision, objects)) = facts.in_force {
        (
            true,
            Reason::Synced,
            format!(
                "synced {} at {}",
                count(objects, "object"),
                revision.short()
            ),
        )
    } else {
        (
            false,
            Reason::Initializing,
            "no revision applied yet".to_string(),
        )
    };
    set_condition(
        &mut s.conditions,
        ConditionType::Ready,
        ready,
        reason,
        message,
        &now_s,
    );
    // Health, as its own condition: each change of health is a transition.
    if facts.in_force.is_some() {
        let message = if s.health == Health::Healthy {
            format!("{} healthy", count(s.resources.len(), "object"))
        } else {
            worst_object.clone()
        };
        set_condition(
            &mut s.conditions,
            ConditionType::Healthy,
            s.health == Health::Healthy,
            health_reason(s.health),
            message,
            &now_s,
        );
    }
    // Progress: True while converging within the deadline, False past it.
    let (progressing, reason, message) = match progressing_for {
        None if held.is_some() => (
            false,
            Reason::HeldBySyncWindow,
            "a sync window holds the sync; the progress deadline counts from when it lets the sync through".to_string(),
        ),
        // Nothing applied yet (the source never answered): not "converged".
        None if facts.in_force.is_none() => (
            true,
            Reason::Initializing,
            "no revision applied yet".to_string(),
        ),
        None => (
            true,
            Reason::Converged,
            if outage_only {
                "healthy, matching the revision in force; the source cannot be read"
            } else {
                "synced and healthy"
            }
            .to_string(),
        ),
        Some(d) if d > deadline => (
            false,
            Reason::ProgressDeadlineExceeded,
            format!(
                "not converged within progressDeadline {} (since {since}): {}",
                secs(deadline),
                match s.condition(ConditionType::Ready) {
                    // Something worse than the deadline holds the app up: name it.
                    Some(c)
                        if !matches!(
                            c.reason,
                            Reason::ProgressDeadlineExceeded | Reason::OutOfSync
                        ) && c.status == crate::status::ConditionStatus::False =>
                    {
                        format!("{}: {}", c.reason, c.message)
                    }
                    _ => what_holds_it_up(&worst_object, out_of_sync, pending_revision),
                }
            ),
        ),
        Some(_) => (
            true,
            Reason::Progressing,
            format!(
                "converging since {since} (progressDeadline {})",
                secs(deadline)
            ),
        ),
    };
    set_condition(
        &mut s.conditions,
        ConditionType::Progressing,
        progressing,
        reason,
        message,
        &now_s,
    );
    // The gap's age past its threshold.
    match (facts.stale_after, stale) {
        (Some(_), Some(limit)) => set_condition(
            &mut s.conditions,
            ConditionType::Stale,
            true,
            Reason::GapExceededThreshold,
            format!(
                "out of sync since {} (staleAfter {})",
                s.out_of_sync_since.as_deref().unwrap_or_default(),
                secs(limit)
            ),
            &now_s,
        ),
        (Some(limit), None) => set_condition(
            &mut s.conditions,
            ConditionType::Stale,
            false,
            Reason::WithinThreshold,
            format!("staleAfter {}", secs(limit)),
            &now_s,
        ),
        (None, _) => remove_condition(&mut s.conditions, ConditionType::Stale),
    };
    // Sync windows.
    match facts.window {
        Some(w) => {
            set_condition(
                &mut s.conditions,
                ConditionType::SyncWindow,
                w.automatic,
                w.reason.clone().unwrap_or(Reason::Open),
                w.message.clone(),
                &now_s,
            );
        }
        None => {
            remove_condition(&mut s.conditions, ConditionType::SyncWindow);
        }
    }
    // Fights with another writer.
    if let Some(c) = &facts.contest {
        set_condition(
            &mut s.conditions,
            ConditionType::Contested,
            true,
            Reason::AnotherWriter,
            format!(
                "{} field {} is changed back by another writer ({} reverts); next revert at {}{}",
                c.key,
                c.fields.join(", "),
                c.reverts,
                rfc3339(c.next_revert),
                if c.objects > 1 {
                    format!("; {} objects contested", c.objects)
                } else {
                    String::new()
                }
            ),
            &now_s,
        );
    } else if s.condition(ConditionType::Contested).is_some() {
        set_condition(
            &mut s.conditions,
            ConditionType::Contested,
            false,
            Reason::NoContention,
            "no other writer is changing objects back",
            &now_s,
        );
    }
    let failing = facts.failing
        || matches!(facts.problem, Some(Problem::Source { .. }))
        || facts.sync_error.is_some();
    if failing {
        set_condition(
            &mut s.conditions,
            ConditionType::Reconciling,
            true,
            Reason::RetryScheduled,
            "the last attempt failed; retrying with backoff",
            &now_s,
        );
    } else {
        set_condition(
            &mut s.conditions,
            ConditionType::Reconciling,
            false,
            Reason::Succeeded,
            "reconciled",
            &now_s,
        );
    }
    match facts.problem {
        Some(Problem::Source { reason, message }) => {
            set_condition(
                &mut s.conditions,
                ConditionType::SourceAvailable,
                false,
                reason.clone(),
                message.clone(),
                &now_s,
            );
        }
        _ => {
            if let Some(m) = facts.source_message {
                set_condition(
                    &mut s.conditions,
                    ConditionType::SourceAvailable,
                    true,
                    Reason::Succeeded,
                    m,
                    &now_s,
                );
            }
        }
    }
}

/// What keeps an app from converging, for the deadline's messages: the worst object and why,
/// and how many objects differ from Git (or that a revision is not applied yet).
fn what_holds_it_up(worst_object: &str, out_of_sync: usize, pending_revision: bool) -> String {
    let mut parts = Vec::new();
    if !worst_object.is_empty() {
        parts.push(worst_object.to_string());
    }
    if out_of_sync > 0 {
        parts.push(format!("{out_of_sync} object(s) differ from Git"));
    } else if pending_revision {
        parts.push("the newest revision is not applied yet".to_string());
    }
    if parts.is_empty() {
        "not synced".to_string()
    } else {
        parts.join("; ")
    }
}

/// True when the transition of a condition to its current status and reason is a warning in
/// the log (something got worse); getting there (`Progressing`, `Initializing`, held by a
/// window the user set) or recovering is information.
pub fn is_warning(c: &crate::status::Condition) -> bool {
    use crate::status::ConditionStatus;
    let transient = matches!(
        c.reason,
        Reason::Progressing
            | Reason::Initializing
            | Reason::NotSyncedYet
            | Reason::HeldBySyncWindow
    );
    !transient
        && match c.type_ {
            ConditionType::Ready
            | ConditionType::Healthy
            | ConditionType::SourceAvailable
            | ConditionType::Progressing => c.status == ConditionStatus::False,
            ConditionType::Stalled | ConditionType::Stale | ConditionType::Contested => {
                c.status == ConditionStatus::True
            }
            _ => false,
        }
}

#[cfg(test)]
mod tests {
    //! The status rules with a fixed clock: no sleeps.

    use super::*;
    use crate::status::{ConditionStatus, ResourceStatus};

    const T0: u64 = 1_800_000_000; // 2027-01-15T08:00:00Z

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + secs)
    }

    fn object(name: &str, sync: SyncStatus, health: Health) -> ResourceStatus {
        ResourceStatus {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "default".into(),
            name: name.into(),
            sync,
            health,
            health_message: None,
            message: None,
        }
    }

    /// One app's status over time, with the facts changed between passes.
    struct App {
        status: AppStatus,
        clocks: Clocks,
        revision: Revision,
        applied: Option<Revision>,
        problem: Option<Problem>,
        window: Option<window::State>,
        stale_after: Option<Duration>,
        contest: Option<Contest>,
        conflicts: BTreeMap<ObjectKey, String>,
    }

    impl App {
        fn new() -> Self {
            let revision = Revision("a".repeat(40));
            App {
                status: AppStatus::new("web"),
                clocks: Clocks::default(),
                applied: Some(revision.clone()),
                revision,
                problem: None,
                window: None,
                stale_after: None,
                contest: None,
                conflicts: BTreeMap::new(),
            }
        }

        fn objects(&mut self, objects: Vec<ResourceStatus>) -> &mut Self {
            self.status.resources = objects.into_iter().map(std::sync::Arc::new).collect();
            self
        }

        fn pass(&mut self, secs: u64) -> &AppStatus {
            let facts = Facts {
                in_force: Some((&self.revision, self.status.resources.len())),
                applied: self.applied.as_ref(),
                last_attempted: Some(&self.revision),
                problem: self.problem.as_ref(),
                sync_error: None,
                conflicts: &self.conflicts,
                prune_blocked: None,
                window: self.window.as_ref(),
                self_heal: true,
                progress_deadline: Duration::from_secs(600),
                stale_after: self.stale_after,
                failing: false,
                source_message: Some("fetched refs/heads/main at aaaaaaaaaaaa"),
                contest: self.contest.clone(),
            };
            compute(&mut self.status, &facts, &mut self.clocks, at(secs));
            &self.status
        }

        fn condition(&self, t: ConditionType) -> (ConditionStatus, Reason, String) {
            let c = self.status.condition(t).expect("condition set");
            (
                c.status.clone(),
                c.reason.clone(),
                c.last_transition_time.clone(),
            )
        }
    }

    fn synced() -> Vec<ResourceStatus> {
        vec![object("a", SyncStatus::Synced, Health::Healthy)]
    }

    fn drifted() -> Vec<ResourceStatus> {
        vec![object("a", SyncStatus::OutOfSync, Health::Healthy)]
    }

    #[test]
    fn synced_and_healthy_is_ready_and_converged() {
        let mut app = App::new();
        let st = app.objects(synced()).pass(0);
        assert_eq!(st.sync, SyncStatus::Synced);
        assert!(st.out_of_sync_since.is_none() && st.progressing_since.is_none());
        assert_eq!(app.condition(ConditionType::Ready).1, Reason::Synced);
        assert_eq!(
            app.condition(ConditionType::Progressing).1,
            Reason::Converged
        );
        assert_eq!(
            app.condition(ConditionType::Healthy).0,
            ConditionStatus::True
        );
    }

    #[test]
    fn the_progress_deadline_passes_at_its_instant_and_ready_follows_the_worst() {
        let mut app = App::new();
        app.objects(synced()).pass(0);
        app.objects(drifted()).pass(10);
        assert_eq!(
            app.status.progressing_since.as_deref(),
            Some("2027-01-15T08:00:10Z")
        );
        assert_eq!(app.condition(ConditionType::Ready).1, Reason::OutOfSync);
        // One second before the deadline: still progressing.
        app.pass(610);
        assert_eq!(
            app.condition(ConditionType::Progressing).1,
            Reason::Progressing
        );
        // Past it: both Progressing and Ready say so (the deadline beats OutOfSync), and the
        // transition time is the pass that saw it.
        app.pass(611);
        let (status, reason, time) = app.condition(ConditionType::Progressing);
        assert_eq!(
            (status, reason),
            (ConditionStatus::False, Reason::ProgressDeadlineExceeded)
        );
        assert_eq!(time, "2027-01-15T08:10:11Z");
        assert_eq!(
            app.condition(ConditionType::Ready).1,
            Reason::ProgressDeadlineExceeded
        );
        // Converged again: the clock stops.
        app.objects(synced()).pass(700);
        assert!(app.status.progressing_since.is_none());
        assert_eq!(app.condition(ConditionType::Ready).1, Reason::Synced);
    }

    #[test]
    fn time_held_by_a_sync_window_does_not_count_toward_the_deadline() {
        let mut app = App::new();
        app.window = Some(window::State {
            automatic: false,
            manual: true,
            reason: Some(Reason::DenyWindowActive),
            message: "held by the deny window".into(),
            next_open: None,
        });
        app.objects(drifted()).pass(0);
        app.pass(5000);
        assert!(app.status.progressing_since.is_none());
        assert_eq!(
            app.condition(ConditionType::Progressing).1,
            Reason::HeldBySyncWindow
        );
        assert_eq!(
            app.condition(ConditionType::Ready).1,
            Reason::HeldBySyncWindow
        );
        assert_eq!(
            app.condition(ConditionType::SyncWindow).1,
            Reason::DenyWindowActive
        );
        // The window opens: the clock starts then.
        app.window = None;
        app.pass(5001);
        assert_eq!(
            app.status.progressing_since.as_deref(),
            Some("2027-01-15T09:23:21Z")
        );
        assert!(app.status.condition(ConditionType::SyncWindow).is_none());
    }

    #[test]
    fn the_gap_turns_stale_past_its_threshold_and_closes_when_synced() {
        let mut app = App::new();
        app.stale_after = Some(Duration::from_secs(1200));
        app.objects(drifted()).pass(0);
        assert_eq!(
            app.status.out_of_sync_since.as_deref(),
            Some("2027-01-15T08:00:00Z")
        );
        app.pass(1200);
        assert_eq!(
            app.condition(ConditionType::Stale).1,
            Reason::WithinThreshold
        );
        app.pass(1201);
        let (status, reason, time) = app.condition(ConditionType::Stale);
        assert_eq!(
            (status, reason),
            (ConditionStatus::True, Reason::GapExceededThreshold)
        );
        assert_eq!(time, "2027-01-15T08:20:01Z");
        app.objects(synced()).pass(1300);
        assert!(app.status.out_of_sync_since.is_none());
        assert_eq!(
            app.condition(ConditionType::Stale).0,
            ConditionStatus::False
        );
    }

    #[test]
    fn a_gap_reopened_during_a_fight_keeps_its_first_start() {
        let mut app = App::new();
        app.stale_after = Some(Duration::from_secs(60));
        app.objects(drifted()).pass(0);
        app.contest = Some(Contest {
            key: ObjectKey::new("", "ConfigMap", "default", "a"),
            fields: vec!["data.k".into()],
            reverts: 3,
            next_revert: at(40),
            objects: 1,
        });
        // Reverted (Synced for a moment), changed back, reverted...
        app.objects(synced()).pass(10);
        assert!(app.status.out_of_sync_since.is_none());
        app.objects(drifted()).pass(20);
        assert_eq!(
            app.status.out_of_sync_since.as_deref(),
            Some("2027-01-15T08:00:00Z")
        );
        app.pass(61);
        assert_eq!(app.condition(ConditionType::Stale).0, ConditionStatus::True);
        let (status, reason, _) = app.condition(ConditionType::Contested);
        assert_eq!(
            (status, reason),
            (ConditionStatus::True, Reason::AnotherWriter)
        );
        assert!(
            app.status
                .condition(ConditionType::Contested)
                .unwrap()
                .message
                .contains("next revert at 2027-01-15T08:00:40Z")
        );
        // The fight ends: a new gap starts fresh.
        app.contest = None;
        app.objects(synced()).pass(70);
        app.objects(drifted()).pass(80);
        assert_eq!(
            app.status.out_of_sync_since.as_deref(),
            Some("2027-01-15T08:01:20Z")
        );
        assert_eq!(
            app.condition(ConditionType::Contested).1,
            Reason::NoContention
        );
    }

    #[test]
    fn a_source_outage_alone_opens_no_gap_and_starts_no_clock() {
        let mut app = App::new();
        app.stale_after = Some(Duration::from_secs(60));
        app.objects(synced()).pass(0);
        app.problem = Some(Problem::Source {
            reason: Reason::Unreachable,
            message: "cannot reach the repository".into(),
        });
        app.pass(10);
        app.pass(5000);
        assert_eq!(app.status.sync, SyncStatus::Unknown);
        assert!(app.status.out_of_sync_since.is_none() && app.status.progressing_since.is_none());
        assert_eq!(
            app.condition(ConditionType::Stale).0,
            ConditionStatus::False
        );
        assert_eq!(
            app.condition(ConditionType::Ready).1,
            Reason::SourceUnavailable
        );
        assert_eq!(
            app.condition(ConditionType::SourceAvailable).1,
            Reason::Unreachable
        );
        assert_eq!(
            app.condition(ConditionType::Reconciling).1,
            Reason::RetryScheduled
        );
    }

    #[test]
    fn last_transition_time_moves_exactly_when_status_or_reason_changes() {
        let mut app = App::new();
        app.objects(vec![object("a", SyncStatus::Synced, Health::Progressing)])
            .pass(0);
        assert_eq!(
            app.condition(ConditionType::Healthy).2,
            "2027-01-15T08:00:00Z"
        );
        // A new message (two objects) with the same reason: no transition.
        app.objects(vec![
            object("a", SyncStatus::Synced, Health::Progressing),
            object("b", SyncStatus::Synced, Health::Progressing),
        ])
        .pass(5);
        assert_eq!(
            app.condition(ConditionType::Healthy).2,
            "2027-01-15T08:00:00Z"
        );
        // Progressing → Degraded: the same status (False), a new reason, a transition.
        app.objects(vec![object("a", SyncStatus::Synced, Health::Degraded)])
            .pass(9);
        let (status, reason, time) = app.condition(ConditionType::Healthy);
        assert_eq!((status, reason), (ConditionStatus::False, Reason::Degraded));
        assert_eq!(time, "2027-01-15T08:00:09Z");
    }

    #[test]
    fn a_pending_revision_is_out_of_sync_and_an_ownership_conflict_is_named() {
        let mut app = App::new();
        app.applied = None;
        app.objects(synced()).pass(0);
        assert_eq!(app.status.sync, SyncStatus::OutOfSync);
        app.applied = Some(app.revision.clone());
        app.conflicts.insert(
            ObjectKey::new("", "ConfigMap", "default", "a"),
            "also declared by app other, which owns it".into(),
        );
        app.pass(1);
        assert_eq!(
            app.condition(ConditionType::Ready).1,
            Reason::OwnershipConflict
        );
    }

    #[test]
    fn a_deadline_passed_behind_a_bad_revision_names_it_and_a_window_holds_off_staleness() {
        let mut app = App::new();
        app.objects(synced()).pass(0);
        app.applied = None; // a newer revision is pending...
        app.pass(1);
        app.problem = Some(Problem::Invalid {
            reason: Reason::InvalidManifest,
            message: "invalid manifest app/a.yaml:3:1: bad".into(),
        });
        app.pass(700);
        let p = app
            .status
            .condition(ConditionType::Progressing)
            .unwrap()
            .clone();
        assert_eq!(p.reason, Reason::ProgressDeadlineExceeded);
        assert!(
            p.message
                .contains("): InvalidManifest: invalid manifest app/a.yaml:3:1: bad"),
            "{}",
            p.message
        );
        assert!(is_warning(&p));
        // Held by a window: the gap is deliberate, not stale.
        let mut held = App::new();
        held.stale_after = Some(Duration::from_secs(10));
        held.window = Some(window::State {
            automatic: false,
            manual: true,
            reason: Some(Reason::DenyWindowActive),
            message: "held".into(),
            next_open: None,
        });
        held.objects(drifted()).pass(0);
        held.pass(100);
        assert_eq!(
            held.condition(ConditionType::Stale).0,
            ConditionStatus::False
        );
        // Without detail, the deadline says what is left, never an empty `: ;`.
        let ready = App::new().objects(drifted()).pass(0).clone();
        assert!(!ready.conditions.iter().any(|c| c.message.contains(": ;")));
    }

    #[test]
    fn warnings_are_for_things_getting_worse() {
        let mut app = App::new();
        app.objects(drifted()).pass(0);
        let ready = app.status.condition(ConditionType::Ready).unwrap();
        assert!(is_warning(ready), "{ready:?}");
        app.window = Some(window::State {
            automatic: false,
            manual: true,
            reason: Some(Reason::DenyWindowActive),
            message: "held".into(),
            next_open: None,
        });
        app.pass(1);
        let ready = app.status.condition(ConditionType::Ready).unwrap();
        assert_eq!(ready.reason, Reason::HeldBySyncWindow);
        assert!(!is_warning(ready));
    }
}
