//! What a fetched revision means for an app: the decisions of the fetch stage, taken out of the
//! I/O that surrounds them (fetch, signature check, tree read) so they are tested with plain
//! data. No I/O, no clock.

use std::collections::BTreeMap;

use super::conditions::Problem;
use crate::manifest::DesiredSet;
use crate::object::{Object, ObjectKey, Revision};
use crate::source;
use crate::status::Reason;
use crate::sync::SyncConfig;

/// What to do with a revision the fetch returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// It is the revision in force, read the same way: nothing to read or plan again, and a
    /// problem a newer revision had no longer matters (Git points back at this one).
    InForce,
    /// It was tried already and refused (invalid, blocked): it stays refused without reading it
    /// again, and its problem stays. A refusal by the target (`RejectedByTarget`) is not
    /// this: its cause may be outside Git, so the revision is checked again.
    Refused,
    /// A revision to verify, read and render.
    New,
}

/// Decides what a fetched `revision` is, from the app's facts: the revision in force and the
/// source identity it was read with, the last revision tried, and the current problem.
pub(crate) fn classify(
    in_force: Option<(&Revision, &str)>,
    last_attempted: Option<&Revision>,
    problem: Option<&Problem>,
    revision: &Revision,
    identity: &str,
) -> Verdict {
    if in_force.is_some_and(|(r, source)| r == revision && source == identity) {
        return Verdict::InForce;
    }
    // A target's refusal may come from outside Git (RBAC, an admission webhook): checked
    // again at every fetch, unlike what the revision itself gets wrong.
    let sticky = match problem {
        Some(Problem::Invalid { reason, .. }) => *reason != Reason::RejectedByTarget,
        Some(Problem::Blocked { .. }) => true,
        _ => false,
    };
    if last_attempted == Some(revision) && sticky {
        return Verdict::Refused;
    }
    Verdict::New
}

/// The `SourceAvailable=False` problem of a failed fetch: the reason names the kind of failure
/// (`RefNotFound`, `Timeout`, `AuthenticationFailed`, `HostKeyMismatch`, `Unreachable`, else
/// `FetchFailed`); `message` is the error with its causes.
pub(crate) fn fetch_problem(e: &source::Error, message: String) -> Problem {
    let reason = match e {
        source::Error::RefNotFound { .. } => Reason::RefNotFound,
        source::Error::TimedOut { .. } => Reason::Timeout,
        source::Error::AuthenticationFailed { .. } => Reason::AuthenticationFailed,
        source::Error::HostKeyMismatch { .. } => Reason::HostKeyMismatch,
        source::Error::Unreachable { .. } | source::Error::RepositoryNotFound { .. } => {
            Reason::Unreachable
        }
        _ => Reason::FetchFailed,
    };
    Problem::Source { reason, message }
}

/// The `SourceAvailable=False` problem of a render or chart failure: `ChartDigestChanged` when
/// a chart repository rewrote a pinned release, `ChartUnavailable` for another chart failure,
/// `PathNotFound`-like source errors as [`fetch_problem`] names them, else `RenderFailed` (a
/// renderer missing, failing, hung or too verbose).
pub(crate) fn render_problem(e: &crate::render::Error, message: String) -> Problem {
    let reason = match e {
        crate::render::Error::Source(s) => return fetch_problem(s, message),
        _ if e.is_digest_change() => Reason::ChartDigestChanged,
        _ if e.is_chart() => Reason::ChartUnavailable,
        _ => Reason::RenderFailed,
    };
    Problem::Source { reason, message }
}

/// The `SourceAvailable` message of a good fetch: which ref at which commit, what it was before
/// when it moved, and a history rewrite (force push) when there was one.
pub(crate) fn fetch_message(
    resolved_ref: &str,
    revision: &Revision,
    previous: Option<&Revision>,
    rewritten: bool,
) -> String {
    match (previous, rewritten) {
        (Some(old), true) => format!(
            "fetched {resolved_ref} at {}: history rewritten, it was {} (force push)",
            revision.0, old.0
        ),
        (Some(old), false) => format!(
            "fetched {resolved_ref} at {} (previously {})",
            revision.short(),
            old.short()
        ),
        (None, _) => format!("fetched {resolved_ref} at {}", revision.short()),
    }
}

/// Admits a rendered revision as the desired set to enforce, or says why it is not applied
/// (the revision in force then stays enforced):
///
/// - any error diagnostic: `Invalid`/`InvalidManifest`, naming the first error's file, line
///   and column (nothing of a partly valid revision is applied);
/// - no objects while the app owns some (`owns_objects`), prunes (`sync.prune`) and does not
///   allow an empty set (`sync.allowEmpty`): `Blocked`, since applying it would delete every
///   object of the app.
pub(crate) fn admit(
    set: DesiredSet,
    revision: &Revision,
    owns_objects: bool,
    sync: &SyncConfig,
    path: &str,
) -> Result<BTreeMap<ObjectKey, Object>, Problem> {
    if let Some(first) = set.first_error() {
        return Err(Problem::Invalid {
            reason: Reason::InvalidManifest,
            message: format!(
                "invalid manifest {}:{}:{}: {}",
                first.path, first.line, first.column, first.message
            ),
        });
    }
    if set.objects.is_empty() && owns_objects && sync.prune && !sync.allow_empty {
        return Err(Problem::Blocked {
            message: format!(
                "revision {} declares no objects under `{path}`; refusing to prune every object of the app (set sync.allowEmpty: true to allow)",
                revision.short()
            ),
        });
    }
    Ok(set
        .objects
        .into_iter()
        .map(|(k, d)| (k, d.object))
        .collect())
}

/// The problem of a revision the target refused in its dry run (`RejectedByTarget`): the
/// first refusal with the `file:line` its object came from, and how many more there are.
/// `refused` is not empty.
pub(crate) fn refusals(
    refused: &[(ObjectKey, String)],
    positions: &BTreeMap<ObjectKey, (String, u64, u64)>,
) -> Problem {
    let (key, why) = &refused[0];
    let at = positions
        .get(key)
        .map(|(path, line, _)| format!("{path}:{line}: "))
        .unwrap_or_default();
    let more = match refused.len() {
        1 => String::new(),
        n => format!(" (and {} more)", n - 1),
    };
    Problem::Invalid {
        reason: Reason::RejectedByTarget,
        message: format!("refused by the target: {at}{key}: {why}{more}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{self, Options};

    fn rev(c: char) -> Revision {
        Revision(c.to_string().repeat(40))
    }

    fn invalid() -> Problem {
        Problem::Invalid {
            reason: Reason::InvalidManifest,
            message: "bad".into(),
        }
    }

    fn parse(text: &str) -> DesiredSet {
        manifest::parse_set(
            [("app.yaml", text.as_bytes())],
            Vec::new(),
            &Options::default(),
        )
    }

    #[test]
    fn the_revision_in_force_read_the_same_way_is_not_read_again() {
        let (a, b) = (rev('a'), rev('b'));
        assert_eq!(
            classify(Some((&a, "s")), Some(&b), Some(&invalid()), &a, "s"),
            Verdict::InForce,
            "Git pointing back at the revision in force clears the newer one's problem"
        );
        assert_eq!(
            classify(Some((&a, "s")), None, None, &a, "other source"),
            Verdict::New,
            "a changed source (path, ref) reads the same commit again"
        );
    }

    #[test]
    fn a_refused_revision_stays_refused_until_another_one_comes() {
        let (a, b, c) = (rev('a'), rev('b'), rev('c'));
        assert_eq!(
            classify(Some((&a, "s")), Some(&b), Some(&invalid()), &b, "s"),
            Verdict::Refused
        );
        let blocked = Problem::Blocked { message: "".into() };
        assert_eq!(
            classify(Some((&a, "s")), Some(&b), Some(&blocked), &b, "s"),
            Verdict::Refused
        );
        assert_eq!(
            classify(Some((&a, "s")), Some(&b), Some(&invalid()), &c, "s"),
            Verdict::New
        );
        // Nor is a refusal by the target (RBAC, a webhook may change): checked again.
        let rejected = Problem::Invalid {
            reason: Reason::RejectedByTarget,
            message: "".into(),
        };
        assert_eq!(
            classify(Some((&a, "s")), Some(&b), Some(&rejected), &b, "s"),
            Verdict::New
        );
        // A source outage is not a verdict on the revision: it is tried again.
        let outage = Problem::Source {
            reason: Reason::Unreachable,
            message: "".into(),
        };
        assert_eq!(
            classify(Some((&a, "s")), Some(&b), Some(&outage), &b, "s"),
            Verdict::New
        );
    }

    #[test]
    fn an_invalid_revision_is_refused_naming_its_first_error() {
        let set = parse("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Bad_Name\n");
        let Err(Problem::Invalid { reason, message }) =
            admit(set, &rev('a'), true, &SyncConfig::default(), "apps")
        else {
            panic!("not refused");
        };
        assert_eq!(reason, Reason::InvalidManifest);
        assert!(
            message.starts_with("invalid manifest app.yaml:4:"),
            "{message}"
        );
    }

    #[test]
    fn an_empty_revision_is_blocked_only_when_it_would_prune_everything() {
        let sync = SyncConfig::default();
        let blocked = admit(parse(""), &rev('a'), true, &sync, "apps");
        let Err(Problem::Blocked { message }) = blocked else {
            panic!("not blocked: {blocked:?}");
        };
        assert!(message.contains("`apps`") && message.contains("sync.allowEmpty"));
        // Nothing owned yet, pruning off, or empty allowed: applied.
        assert!(admit(parse(""), &rev('a'), false, &sync, "apps").is_ok());
        let no_prune = SyncConfig {
            prune: false,
            ..SyncConfig::default()
        };
        assert!(admit(parse(""), &rev('a'), true, &no_prune, "apps").is_ok());
        let allow = SyncConfig {
            allow_empty: true,
            ..SyncConfig::default()
        };
        assert!(admit(parse(""), &rev('a'), true, &allow, "apps").is_ok());
        let one = parse("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n");
        assert_eq!(admit(one, &rev('a'), true, &sync, "apps").unwrap().len(), 1);
    }

    #[test]
    fn a_refusal_names_the_object_its_file_and_line_and_counts_the_rest() {
        let a = ObjectKey::new("apps", "Deployment", "default", "web");
        let b = ObjectKey::new("", "ConfigMap", "default", "x");
        let positions = BTreeMap::from([(a.clone(), ("app/web.yaml".to_string(), 12, 1))]);
        let Problem::Invalid { reason, message } = refusals(
            &[
                (a, "spec.replicas: Invalid value: -1".into()),
                (b, "forbidden".into()),
            ],
            &positions,
        ) else {
            panic!("not Invalid");
        };
        assert_eq!(reason, Reason::RejectedByTarget);
        assert_eq!(
            message,
            "refused by the target: app/web.yaml:12: Deployment.apps default/web: spec.replicas: Invalid value: -1 (and 1 more)"
        );
    }

    #[test]
    fn fetch_failures_are_named_by_kind_and_moves_say_where_from() {
        let (a, b) = (rev('a'), rev('b'));
        assert_eq!(
            fetch_message("refs/heads/main", &b, Some(&a), false),
            "fetched refs/heads/main at bbbbbbbbbbbb (previously aaaaaaaaaaaa)"
        );
        assert!(
            fetch_message("refs/heads/main", &b, Some(&a), true)
                .ends_with(&format!("it was {} (force push)", a.0))
        );
        assert_eq!(
            fetch_message("refs/heads/main", &b, None, false),
            "fetched refs/heads/main at bbbbbbbbbbbb"
        );
    }
}
