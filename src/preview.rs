//! Pull-request previews: which refs are pull requests, what a preview records, how it is
//! described on the pull request, and how a deployed preview's objects are moved into their
//! own namespace.
//!
//! A preview plans a pull request's head commit against the live store as if it were the app's
//! source, without writing (Argo CD needs an ApplicationSet pull-request generator and
//! third-party tools for this; here the agent does it). Its record lives in the store under
//! the reserved API group (kind `Preview`, namespace = the app, name = the pull request's
//! number), so the HTTP server of any process can show it. The record holds no secret value:
//! the diff and the changes are masked as everywhere else (ARCHITECTURE.md section 6).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::diff::{self, Action, Plan, Summary};
use crate::health::Health;
use crate::manifest::Diagnostic;
use crate::object::{self, Object, ObjectKey, RESERVED_GROUP};
use crate::report::State;
use crate::status::ResourceStatus;
use crate::store::{self, Precondition, Selector, Store, Write};

/// The kind of preview records.
pub const KIND: &str = "Preview";

/// Longest rendered diff kept in a record, in bytes; a longer one is cut at a line boundary
/// and says so.
pub const MAX_DIFF_BYTES: usize = 512 * 1024;

/// Longest pull-request number (what the glob's `*` matched), in characters.
pub const MAX_NUMBER: usize = 63;

/// A glob over full ref names: `*` matches within one path segment (no `/`), `**` across
/// segments. What the first wildcard matches is the pull request's number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefGlob {
    pattern: String,
    tokens: Vec<Token>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Literal(String),
    Star,
    DoubleStar,
}

impl RefGlob {
    /// Parses a glob such as `refs/pull/*/head`.
    ///
    /// # Errors
    ///
    /// A message when the glob does not start with `refs/`, has no wildcard, or holds
    /// whitespace or characters Git forbids in ref names (`?`, `[`, `\`, `~`, `^`, `:`).
    pub fn new(pattern: &str) -> Result<Self, String> {
        if !pattern.starts_with("refs/") {
            return Err(format!(
                "`{pattern}` must be a full ref name glob starting with `refs/`, such as `refs/pull/*/head`"
            ));
        }
        if let Some(c) = pattern
            .chars()
            .find(|c| c.is_whitespace() || "?[\\~^:".contains(*c))
        {
            return Err(format!(
                "`{pattern}` holds `{c}`, which a ref name cannot contain"
            ));
        }
        let mut tokens = Vec::new();
        let mut literal = String::new();
        let mut chars = pattern.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '*' {
                if !literal.is_empty() {
                    tokens.push(Token::Literal(std::mem::take(&mut literal)));
                }
                if chars.peek() == Some(&'*') {
                    chars.next();
                    tokens.push(Token::DoubleStar);
                } else {
                    tokens.push(Token::Star);
                }
            } else {
                literal.push(c);
            }
        }
        if !literal.is_empty() {
            tokens.push(Token::Literal(literal));
        }
        if tokens.iter().all(|t| matches!(t, Token::Literal(_))) {
            return Err(format!(
                "`{pattern}` has no `*`: it must match one ref per pull request, such as `refs/pull/*/head`"
            ));
        }
        Ok(Self {
            pattern: pattern.to_string(),
            tokens,
        })
    }

    /// The glob as written.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// The pull request's number when `name` matches: what the first wildcard matched. `None`
    /// when it does not match, or when that text is not made of ASCII letters, digits, `.`, `_`
    /// and `-` starting with a letter or digit (it is used in URLs, namespaces and record
    /// names: `..` is not a number).
    pub fn number_of(&self, name: &str) -> Option<String> {
        let mut first = None;
        if !match_from(&self.tokens, name, &mut first) {
            return None;
        }
        first.filter(|n| {
            n.len() <= MAX_NUMBER
                && n.starts_with(|c: char| c.is_ascii_alphanumeric())
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        })
    }
}

fn match_from(tokens: &[Token], s: &str, first: &mut Option<String>) -> bool {
    let Some((head, rest)) = tokens.split_first() else {
        return s.is_empty();
    };
    match head {
        Token::Literal(l) => s
            .strip_prefix(l.as_str())
            .is_some_and(|r| match_from(rest, r, first)),
        Token::Star | Token::DoubleStar => {
            let limit = if *head == Token::Star {
                s.find('/').unwrap_or(s.len())
            } else {
                s.len()
            };
            // Shortest match first; every boundary is a char boundary (split on ASCII `/`).
            for end in (0..=limit).filter(|i| s.is_char_boundary(*i)) {
                let mut inner = first.clone();
                if inner.is_none() {
                    inner = Some(s[..end].to_string());
                }
                if match_from(rest, &s[end..], &mut inner) {
                    *first = inner;
                    return true;
                }
            }
            false
        }
    }
}

/// The namespace of a deployed preview: `template` with `{number}` replaced.
///
/// # Errors
///
/// A message when the result is not an RFC 1123 label (Kubernetes' rule for namespaces).
pub fn namespace_for(template: &str, number: &str) -> Result<String, String> {
    let ns = template.replace("{number}", number);
    match object::dns1123_label_error(&ns) {
        None => Ok(ns),
        Some(problem) => Err(format!(
            "preview namespace `{ns}` {problem} (preview.namespace)"
        )),
    }
}

/// The objects of a deployed preview: every namespaced object moved into `namespace` (whatever
/// namespace it declares). Cluster-scoped objects (Namespace, ClusterRole, CRDs...) are left
/// out, since the app's own would be the same objects; their keys are returned second.
///
/// # Errors
///
/// A message naming both objects when two of them become one object in `namespace` (the same
/// kind and name declared in two namespaces).
pub fn into_namespace(
    desired: &BTreeMap<ObjectKey, Object>,
    namespace: &str,
) -> Result<(BTreeMap<ObjectKey, Object>, Vec<ObjectKey>), String> {
    let mut out: BTreeMap<ObjectKey, Object> = BTreeMap::new();
    let mut from: BTreeMap<ObjectKey, &ObjectKey> = BTreeMap::new();
    let mut left_out = Vec::new();
    for (key, obj) in desired {
        if object::is_cluster_scoped(key.group(), key.kind()) {
            left_out.push(key.clone());
            continue;
        }
        let mut o = obj.clone();
        o.metadata_mut()
            .insert("namespace".into(), Value::String(namespace.to_string()));
        let moved = o.key();
        if let Some(first) = from.get(&moved) {
            return Err(format!(
                "{first} and {key} would both be {moved} in the preview namespace"
            ));
        }
        from.insert(moved.clone(), key);
        out.insert(moved, o);
    }
    Ok((out, left_out))
}

/// `3 to create, 1 to update, 0 to delete`, or `no changes`.
pub fn describe(s: &Summary) -> String {
    if s.create + s.update + s.delete == 0 {
        "no changes".to_string()
    } else {
        format!(
            "{} to create, {} to update, {} to delete",
            s.create, s.update, s.delete
        )
    }
}

/// One object a preview would change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedChange {
    /// API group, empty for core.
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Namespace, empty for cluster-scoped.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `create`, `update` or `delete`.
    pub action: Action,
    /// Why the write would not happen (a delete with `prune: false`...), if so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// The fields an update changes (secret values masked); empty for create and delete.
    #[serde(default)]
    pub fields: Vec<diff::Change>,
}

/// Most changes kept in a record; the summary counts them all.
pub const MAX_CHANGES: usize = 1000;

/// The changing steps of a plan, as [`PlannedChange`]s (at most [`MAX_CHANGES`]).
pub fn changes_of(plan: &Plan) -> Vec<PlannedChange> {
    plan.steps
        .iter()
        .filter(|s| s.action != Action::Unchanged)
        .take(MAX_CHANGES)
        .map(|s| PlannedChange {
            group: s.key.group().to_string(),
            kind: s.key.kind().to_string(),
            namespace: s.key.namespace().to_string(),
            name: s.key.name().to_string(),
            action: s.action,
            skipped: s.skipped.clone(),
            fields: s.changes.clone(),
        })
        .collect()
}

/// [`diff::render_plan`] (secret values masked), cut to [`MAX_DIFF_BYTES`] at a line boundary.
pub fn render_diff(plan: &Plan) -> String {
    let mut text = diff::render_plan(plan);
    if text.len() > MAX_DIFF_BYTES {
        let mut cut = MAX_DIFF_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let cut = text[..cut].rfind('\n').map_or(cut, |i| i + 1);
        text.truncate(cut);
        text.push_str("... (diff cut at 512 KiB; the summary above counts every object)\n");
    }
    text
}

/// What driftless knows about one pull request of one app. The JSON of
/// `GET /api/v1/apps/{app}/previews/{number}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreviewRecord {
    /// The app.
    pub app: String,
    /// The pull request's number (what the glob's first `*` matched).
    pub number: String,
    /// The full ref name, e.g. `refs/pull/7/head`.
    #[serde(rename = "ref")]
    pub git_ref: String,
    /// The head commit previewed.
    pub revision: String,
    /// The head commit's committer time, in seconds since the Unix epoch.
    pub commit_time: i64,
    /// The commit status posted for it: `success`, `pending`, `failure` or `error`.
    pub state: State,
    /// The status's description: the plan's counts, or the first diagnostic.
    pub description: String,
    /// Counts of the plan (absent when the commit does not parse).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
    /// Every object the pull request would change, with the changed fields.
    #[serde(default)]
    pub changes: Vec<PlannedChange>,
    /// The full diff as text (secret values masked).
    #[serde(default)]
    pub diff: String,
    /// Parse errors and warnings of the pull request's manifests.
    #[serde(default)]
    pub diagnostics: Vec<Diagnostic>,
    /// The namespace of a deployed preview (`preview.deploy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The health of a deployed preview: the worst of its objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<Health>,
    /// The objects of a deployed preview.
    #[serde(default)]
    pub resources: Vec<ResourceStatus>,
    /// The resourceVersion of the app's inventory the plan was made against: when it moves,
    /// the pull request is planned again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_against: Option<u64>,
    /// The head commit whose objects are deployed (an older one while the newest does not
    /// parse: the last good head stays in force).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_revision: Option<String>,
    /// When the record was last written (RFC 3339, UTC).
    pub updated_at: String,
}

impl PreviewRecord {
    /// The key of the record of `app`'s pull request `number`.
    pub fn record_key(app: &str, number: &str) -> ObjectKey {
        ObjectKey::new(RESERVED_GROUP, KIND, app, number)
    }

    /// The record to store: `status` holds this struct.
    pub fn to_record(&self) -> Object {
        let mut body = serde_json::Map::new();
        body.insert(
            "status".into(),
            serde_json::to_value(self).unwrap_or(Value::Null),
        );
        let mut obj = Object::reserved(KIND, &self.number, body);
        obj.metadata_mut()
            .insert("namespace".into(), Value::String(self.app.clone()));
        obj
    }

    /// Reads a record back.
    ///
    /// # Errors
    ///
    /// A `serde_json` error when `status` does not have this shape.
    pub fn from_record(obj: &Object) -> Result<Self, serde_json::Error> {
        serde_json::from_value(obj.get("status").cloned().unwrap_or(Value::Null))
    }
}

/// The Markdown body of the pull request's preview comment (the provider puts its hidden
/// marker before it): the status, a table of the changes (at most 50 rows) and a link to the
/// full diff.
pub fn comment_body(rec: &PreviewRecord, url: Option<&str>) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "**driftless preview of `{}`** at {}: {}\n",
        rec.app,
        &rec.revision[..rec.revision.len().min(12)],
        rec.description
    ));
    if let Some(ns) = &rec.namespace {
        let health = rec.health.map_or("unknown".to_string(), |h| h.to_string());
        out.push_str(&format!("\nDeployed to namespace `{ns}`: {health}.\n"));
    }
    if let Some(d) = rec.diagnostics.iter().find(|d| d.is_error()) {
        // A fenced block: the message may hold backticks of its own.
        out.push_str(&format!(
            "\nThe manifests do not parse:\n\n```text\n{}:{}:{}: {}\n```\n",
            d.path,
            d.line,
            d.column,
            d.message.replace('`', "'")
        ));
    }
    if !rec.changes.is_empty() {
        out.push_str("\n| action | object | fields |\n|---|---|---|\n");
        for c in rec.changes.iter().take(50) {
            let key = ObjectKey::new(&c.group, &c.kind, &c.namespace, &c.name);
            let fields: Vec<&str> = c.fields.iter().map(|f| f.path.as_str()).take(5).collect();
            let verb = match (&c.skipped, c.action) {
                (Some(_), a) => format!("{a:?} (skipped)").to_lowercase(),
                (None, a) => format!("{a:?}").to_lowercase(),
            };
            out.push_str(&format!(
                "| {verb} | `{key}` | {} |\n",
                fields
                    .iter()
                    .map(|f| format!("`{f}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if rec.changes.len() > 50 {
            out.push_str(&format!("\n... and {} more.\n", rec.changes.len() - 50));
        }
    }
    if let Some(u) = url {
        out.push_str(&format!("\n[Full diff]({u})\n"));
    }
    out
}

/// Reads the preview records of `app`, by number.
///
/// # Errors
///
/// A store error, or [`store::Error::Corrupt`] when a record does not parse.
pub async fn list(store: &dyn Store, app: &str) -> store::Result<Vec<PreviewRecord>> {
    let listing = store
        .list(&Selector {
            group: Some(RESERVED_GROUP.into()),
            kind: Some(KIND.into()),
            namespace: Some(app.into()),
        })
        .await?
        .complete()?;
    let mut out = Vec::new();
    for (key, obj) in listing.objects {
        out.push(
            PreviewRecord::from_record(&obj).map_err(|e| store::Error::Corrupt {
                key,
                source: Box::new(e),
            })?,
        );
    }
    out.sort_by_key(|a| natural(&a.number));
    Ok(out)
}

/// A sort key for pull-request numbers: numbers sort as numbers, then other ids as text.
pub(crate) fn natural(n: &str) -> (u64, String) {
    (n.parse().unwrap_or(u64::MAX), n.to_string())
}

/// Reads one preview record.
///
/// # Errors
///
/// As [`list`].
pub async fn read(
    store: &dyn Store,
    app: &str,
    number: &str,
) -> store::Result<Option<PreviewRecord>> {
    let key = PreviewRecord::record_key(app, number);
    match store.get(&key).await? {
        None => Ok(None),
        Some(obj) => {
            PreviewRecord::from_record(&obj)
                .map(Some)
                .map_err(|e| store::Error::Corrupt {
                    key,
                    source: Box::new(e),
                })
        }
    }
}

/// Writes a preview record, replacing what is there (the app's preview loop is its only
/// writer).
///
/// # Errors
///
/// A store error.
pub async fn write(store: &dyn Store, rec: &PreviewRecord) -> store::Result<()> {
    store
        .commit(vec![Write::Put {
            object: rec.to_record(),
            precondition: Precondition::Any,
            json: None,
        }])
        .await?;
    Ok(())
}

/// Deletes a preview record (absent is fine).
///
/// # Errors
///
/// A store error.
pub async fn delete(store: &dyn Store, app: &str, number: &str) -> store::Result<()> {
    store
        .commit(vec![Write::Delete {
            key: PreviewRecord::record_key(app, number),
            precondition: Precondition::Any,
        }])
        .await?;
    Ok(())
}

/// The name under which a deployed preview's inventory is kept: `<app>.preview.<number>`.
/// App names are RFC 1123 labels, which hold no `.`, so this never names an app.
pub fn inventory_name(app: &str, number: &str) -> String {
    format!("{app}.preview.{number}")
}

/// `apps[].preview:`: plan every pull request's head against the live store, and report what
/// merging it would change on the pull request.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PreviewConfig {
    /// Which remote refs are pull requests: a glob over full ref names where `*` matches within
    /// one path segment and `**` across segments. GitHub and Gitea `refs/pull/*/head`, GitLab
    /// `refs/merge-requests/*/head`. What the first `*` matches is the pull request's number
    /// (its id in URLs, namespaces and comments).
    pub refs: serde_saphyr::Spanned<String>,
    /// Keep one comment on the pull request with the diff summary, edited in place (GitHub and
    /// Gitea issue comments, GitLab merge-request notes). Default false; needs `status`.
    #[serde(default)]
    pub comment: bool,
    /// Also apply each pull request's objects into their own namespace, reconcile them and
    /// delete them when the ref goes away. Default false.
    #[serde(default)]
    pub deploy: bool,
    /// The namespace of a deployed preview; `{number}` is replaced by the pull request's
    /// number. Default `pr-{number}`. Must give an RFC 1123 label.
    #[serde(default = "default_preview_namespace")]
    pub namespace: serde_saphyr::Spanned<String>,
    /// At most this many previews per app (the newest head commits first). Default 20.
    #[serde(default = "default_max_open")]
    pub max_open: serde_saphyr::Spanned<usize>,
    /// Refs whose head commit (committer time) is older than this are skipped. No limit by
    /// default.
    #[serde(default, deserialize_with = "crate::yaml::opt_duration")]
    pub max_age: Option<serde_saphyr::Spanned<std::time::Duration>>,
}

fn default_preview_namespace() -> serde_saphyr::Spanned<String> {
    crate::yaml::unspanned("pr-{number}".to_string())
}

fn default_max_open() -> serde_saphyr::Spanned<usize> {
    crate::yaml::unspanned(20)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn globs_match_one_segment_per_star_and_give_the_number() {
        let g = RefGlob::new("refs/pull/*/head").unwrap();
        assert_eq!(g.number_of("refs/pull/7/head").as_deref(), Some("7"));
        assert_eq!(g.number_of("refs/pull/123/head").as_deref(), Some("123"));
        assert_eq!(g.number_of("refs/pull/7/merge"), None);
        assert_eq!(g.number_of("refs/pull/7/x/head"), None, "one segment");
        assert_eq!(g.number_of("refs/pull//head"), None, "empty");
        assert_eq!(g.number_of("refs/pull/../head"), None, "dots");
        assert_eq!(g.number_of("refs/pull/-1/head"), None);
        let long = format!("refs/pull/{}/head", "9".repeat(300));
        assert_eq!(g.number_of(&long), None, "too long");
        assert_eq!(g.number_of("refs/heads/main"), None);
        let gl = RefGlob::new("refs/merge-requests/*/head").unwrap();
        assert_eq!(
            gl.number_of("refs/merge-requests/42/head").as_deref(),
            Some("42")
        );
        let deep = RefGlob::new("refs/heads/preview/**").unwrap();
        assert_eq!(
            deep.number_of("refs/heads/preview/feature-x").as_deref(),
            Some("feature-x")
        );
        assert_eq!(
            deep.number_of("refs/heads/preview/a/b"),
            None,
            "a `/` is not allowed in a number"
        );
        let mid = RefGlob::new("refs/heads/pr-*").unwrap();
        assert_eq!(mid.number_of("refs/heads/pr-9").as_deref(), Some("9"));
    }

    #[test]
    fn bad_globs_are_refused_with_a_reason() {
        assert!(RefGlob::new("pull/*/head").unwrap_err().contains("refs/"));
        assert!(
            RefGlob::new("refs/pull/1/head")
                .unwrap_err()
                .contains("no `*`")
        );
        assert!(RefGlob::new("refs/pull/?/head").unwrap_err().contains('?'));
        assert!(RefGlob::new("refs/pull/* /head").is_err());
    }

    #[test]
    fn namespaces_come_from_the_template_and_are_validated() {
        assert_eq!(namespace_for("pr-{number}", "7").unwrap(), "pr-7");
        assert!(
            namespace_for("pr-{number}", "feature_x")
                .unwrap_err()
                .contains("pr-feature_x")
        );
        assert!(
            namespace_for("pr-{number}", "Fix")
                .unwrap_err()
                .contains("`pr-Fix`"),
            "never changed silently"
        );
    }

    #[test]
    fn deployed_previews_move_namespaced_objects_and_leave_cluster_scoped_ones_out() {
        let mk = |v: Value| {
            let o = Object::from_value(v).unwrap();
            (o.key(), o)
        };
        let desired: BTreeMap<_, _> = [
            mk(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "namespace": "default"}})),
            mk(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "web"}})),
        ]
        .into_iter()
        .collect();
        let (moved, left_out) = into_namespace(&desired, "pr-7").unwrap();
        assert_eq!(
            moved.keys().map(ToString::to_string).collect::<Vec<_>>(),
            vec![ObjectKey::new("", "ConfigMap", "pr-7", "a").to_string()]
        );
        assert_eq!(moved.values().next().unwrap().namespace(), "pr-7");
        assert_eq!(left_out, vec![ObjectKey::new("", "Namespace", "", "web")]);
        let twice: BTreeMap<_, _> = [
            mk(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "namespace": "team-a"}})),
            mk(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "namespace": "team-b"}})),
        ]
        .into_iter()
        .collect();
        let e = into_namespace(&twice, "pr-7").unwrap_err();
        assert!(
            e.contains("team-a/a") && e.contains("team-b/a") && e.contains("pr-7/a"),
            "{e}"
        );
    }

    #[test]
    fn descriptions_count_what_would_change() {
        let s = Summary {
            create: 3,
            update: 1,
            delete: 0,
            unchanged: 9,
            skipped: 0,
        };
        assert_eq!(describe(&s), "3 to create, 1 to update, 0 to delete");
        assert_eq!(
            describe(&Summary {
                unchanged: 4,
                ..Summary::default()
            }),
            "no changes"
        );
    }

    #[test]
    fn records_round_trip_and_live_in_the_apps_namespace() {
        let rec = PreviewRecord {
            app: "web".into(),
            number: "7".into(),
            git_ref: "refs/pull/7/head".into(),
            revision: "a".repeat(40),
            commit_time: 1_700_000_000,
            state: State::Success,
            description: "no changes".into(),
            summary: Some(Summary::default()),
            changes: Vec::new(),
            diff: String::new(),
            diagnostics: Vec::new(),
            namespace: None,
            health: None,
            resources: Vec::new(),
            planned_against: Some(3),
            deployed_revision: None,
            updated_at: "2026-11-29T12:00:00Z".into(),
        };
        let obj = rec.to_record();
        assert_eq!(obj.key(), PreviewRecord::record_key("web", "7"));
        assert_eq!(PreviewRecord::from_record(&obj).unwrap(), rec);
        let v = serde_json::to_value(&rec).unwrap();
        assert_eq!(v["ref"], "refs/pull/7/head");
        assert_eq!(v["state"], "success");
        let body = comment_body(&rec, Some("https://d.example/apps/web/previews/7"));
        assert!(body.starts_with("**driftless preview of `web`**"), "{body}");
        assert!(body.contains("no changes"), "{body}");
        assert!(
            body.contains("(https://d.example/apps/web/previews/7)"),
            "{body}"
        );
    }
}
