//! The control loop: triggers, per-app state, conditions, the gap's age, backoff.
//!
//! Each app runs in its own task (a loop around [`App::reconcile`]) and is reconciled when something may have
//! changed: its poll interval elapsed, a manual request came, or the store's change feed
//! reported a change to an object it owns. A reconcile is level-triggered: it looks at Git and
//! the store as they are and makes the store match, whatever the trigger was. A change-feed
//! trigger only narrows the work to the keys that changed, which is how drift is reverted within
//! milliseconds instead of at the next poll.
//!
//! Guarantees:
//! - A revision with any error applies nothing; the revision in force stays enforced (and is
//!   remembered across restarts through the inventory, whose last-applied copies are exactly
//!   the desired set in force).
//! - Errors never stop the loop. Repeated failures back off exponentially (5 s doubling to
//!   3 min), and the status says why.
//! - The status record is written only when it changes.

//!
//! Layout: [`app`] is one app's reconcile (the pipeline and the status it records),
//! [`agent`] runs the apps (one loop each, one store watch feeding them, manual triggers,
//! readiness), [`backoff`] holds the retry and fight backoff, [`preview`] runs an app's
//! pull-request previews beside its loop.

mod agent;
mod app;
mod backoff;
mod conditions;
mod preview;
mod revision;
mod status_writer;

pub use agent::{Agent, Gate, Handle, Latest, REQUEST_SPACING, Readiness};
pub use app::App;
pub use backoff::{Backoff, Fights};
pub use preview::{PassReport, Previews};

use std::collections::BTreeSet;

use crate::diff::Summary;
use crate::object::ObjectKey;
use crate::{health, store, sync};

/// Errors that stop an agent from starting (once running, errors become conditions).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the app's inventory or status record at start failed.
    #[error("cannot load the state of app {app}")]
    LoadFailed {
        /// The app.
        app: String,
        /// Why.
        #[source]
        source: sync::Error,
    },
    /// The status record of an app is unreadable.
    #[error("cannot read the status of app {app}")]
    StatusUnreadable {
        /// The app.
        app: String,
        /// Why.
        #[source]
        source: store::Error,
    },
    /// The preview records of an app are unreadable.
    #[error("cannot read the previews of app {app}")]
    PreviewsUnreadable {
        /// The app.
        app: String,
        /// Why.
        #[source]
        source: store::Error,
    },
    /// The app's `preview` section is missing or its `refs` glob is invalid (the config's
    /// validation normally catches this first).
    #[error("app {app}: invalid preview section: {message}")]
    InvalidPreview {
        /// The app.
        app: String,
        /// What is wrong.
        message: String,
    },
}

/// Why a reconcile runs. The reconcile does the same level-triggered work for each; the trigger
/// only decides whether Git is fetched and how many objects are looked at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// The poll interval elapsed, a manual request came, or this is the first pass: fetch Git,
    /// then enforce.
    Fetch,
    /// Enforce the revision in force on every object, without fetching (the change feed lost
    /// track, e.g. after compaction).
    Enforce,
    /// These objects changed in the store: enforce just them.
    Keys(BTreeSet<ObjectKey>),
    /// A person asked for a sync (`POST /api/v1/apps/{name}/sync`): as `Fetch`, and allowed
    /// through sync windows that have `manualSync: true`.
    Manual,
    /// Something timed is due: a held revert, a sync window opening or closing, a progress
    /// deadline or staleness threshold passing ([`App::next_wakeup`]).
    Wake,
}

/// What to do after a reconcile, as kube-runtime's `Action`: run again at `at` with `trigger`
/// (a fetch when the poll or a retry is due, a [`Trigger::Wake`] when something timed comes
/// first), for the reason `why`. Changes in the store and requests still run sooner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Action {
    /// When to run again.
    pub at: std::time::Instant,
    /// What to run then: [`Trigger::Fetch`] or [`Trigger::Wake`].
    pub trigger: Trigger,
    /// Why then.
    pub why: Requeue,
}

/// Why an app runs again when its [`Action`] says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requeue {
    /// The poll interval (`source.interval`) elapsed.
    Poll,
    /// A retry after a failure, with backoff.
    Retry,
    /// A revert held back by a fight is due.
    HeldRevert,
    /// A sync window opens or closes.
    SyncWindow,
    /// The progress deadline passes.
    ProgressDeadline,
    /// The gap reaches `staleAfter`.
    StaleAfter,
}

/// How a reconcile failed, for the error policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The source could not be fetched or read: retry the fetch with backoff.
    Source,
    /// The store refused a write: retry with backoff, but fetch at least every interval.
    Store,
}

/// What one reconcile did, for logs and the `sync` command.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Counts of the plan's actions (all zero when nothing was planned).
    pub summary: Summary,
    /// Objects whose drift was reverted by a change-feed trigger.
    pub drift_reverted: usize,
    /// Of those, how many per field manager behind the change (`unknown` when the store
    /// names none), for the drift metric's `manager` label.
    pub reverted_by: std::collections::BTreeMap<String, u64>,
    /// True when a new revision was applied.
    pub applied_new_revision: bool,
    /// The store revision written, 0 when nothing was.
    pub committed_revision: u64,
    /// The rendered diff of a dry run (empty otherwise).
    pub dry_run_diff: String,
    /// True when the plan was only computed, because the app is detect-only (`selfHeal: false`
    /// and no new revision) or a sync window holds it: the counts say what differs, nothing was
    /// written.
    pub detect_only: bool,
}

pub use crate::store::error_chain;

/// [`health::assess`]; with Lua checks among the rules (each may run for up to a second), on a
/// multi-threaded runtime it runs through `block_in_place`, so the runtime moves this worker's
/// other tasks (drift reverts of other apps, the server) to another thread meanwhile.
pub(crate) fn assess_health(
    live: Option<&crate::object::Object>,
    rules: &health::CustomRules,
    kinds: &health::StatusKinds,
) -> health::Assessment {
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if rules.has_lua() && multi_thread {
        tokio::task::block_in_place(|| health::assess(live, rules, kinds))
    } else {
        health::assess(live, rules, kinds)
    }
}
