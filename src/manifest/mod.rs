//! Manifests: file bytes → objects and diagnostics (file, line, column).
//!
//! The rules are those of ARCHITECTURE.md section 5. YAML is read by `serde-saphyr` (YAML 1.2 core
//! schema, duplicate keys rejected, `<<` merge keys applied, alias expansion under a budget)
//! into a tree that remembers where each node came from, so every diagnostic names a line and
//! column. JSON files go through the same parser (JSON is YAML 1.2), which gives them the same
//! duplicate-key check and positions. This module does no I/O.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;
use serde_json::{Map, Number, Value};

use crate::object::{self, Object, ObjectKey};

mod fast;
mod tree;
use tree::{Node, NodeKind, parse_documents};

/// How serious a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The file was read but something in it was left out on purpose (e.g. a Helm values file).
    Warning,
    /// The revision cannot be applied.
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Warning => "warning",
            Severity::Error => "error",
        })
    }
}

/// One finding about one place in one file. Lines and columns count from 1; column counts
/// characters, not bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Diagnostic {
    /// `error` or `warning`.
    pub severity: Severity,
    /// Path of the file inside the repository (or as given on the command line).
    pub path: String,
    /// 1-based line.
    pub line: u64,
    /// 1-based column, in characters.
    pub column: u64,
    /// What is wrong and, where it helps, how to write it instead.
    pub message: String,
}

impl Diagnostic {
    /// An error at `path:line:column`.
    pub fn error(path: &str, line: u64, column: u64, message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Error,
            path: path.to_string(),
            line,
            column,
            message: message.into(),
        }
    }

    /// A warning at `path:line:column`.
    pub fn warning(path: &str, line: u64, column: u64, message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Warning,
            ..Self::error(path, line, column, message)
        }
    }

    /// True for errors.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    /// `path:line:column: severity: message`, the format of `driftless validate`, with
    /// control characters escaped ([`object::printable`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}: {}",
            object::printable(&self.path),
            self.line,
            self.column,
            self.severity,
            object::printable(&self.message)
        )
    }
}

/// An object as declared, with where it was declared.
#[derive(Clone, Debug, PartialEq)]
pub struct Declared {
    /// The object, its namespace already defaulted.
    pub object: Object,
    /// File it came from.
    pub path: String,
    /// 1-based line of the document (or `List` item) that declared it.
    pub line: u64,
    /// 1-based column of that document.
    pub column: u64,
}

/// The objects declared in one revision (or one set of files), and what was found on the way.
#[derive(Clone, Debug, Default)]
pub struct DesiredSet {
    /// Objects by key. Each key appears once: a second declaration is an error diagnostic.
    pub objects: BTreeMap<ObjectKey, Declared>,
    /// Every warning and error, in file order.
    pub diagnostics: Vec<Diagnostic>,
    /// How many documents were skipped with a warning (not objects).
    pub skipped: usize,
    /// How many manifest files were read.
    pub files: usize,
}

impl DesiredSet {
    /// True when any diagnostic is an error: such a set must not be applied at all.
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }

    /// The first error, for one-line summaries.
    pub fn first_error(&self) -> Option<&Diagnostic> {
        self.diagnostics.iter().find(|d| d.is_error())
    }
}

/// What parsing a set of files needs to know.
#[derive(Clone, Debug)]
pub struct Options {
    /// Namespace given to namespaced objects that declare none (the app's `target.namespace`).
    pub default_namespace: String,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            default_namespace: "default".into(),
        }
    }
}

/// True for the file names driftless reads as manifests: `*.yaml`, `*.yml`, `*.json`, and
/// `Kustomization` (kustomize's third name for its file, without an extension), which a plain
/// read refuses (its folder is rendered, [`crate::source::KUSTOMIZATION_FILES`]).
pub fn is_manifest_path(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name == "Kustomization"
        || [".yaml", ".yml", ".json"]
            .iter()
            .any(|ext| name.len() > ext.len() && name.ends_with(ext))
}

/// Parses a set of files into a desired set.
///
/// `files` are `(path, bytes)` pairs; they are read in path order whatever order they come in.
/// Diagnostics that were found before parsing (an unreadable symlink, say) can be passed in
/// `prior` so they keep their place in the set.
pub fn parse_set<'a>(
    files: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    prior: Vec<Diagnostic>,
    opts: &Options,
) -> DesiredSet {
    let mut files: Vec<(&str, &[u8])> = files.into_iter().collect();
    files.sort_by(|a, b| a.0.cmp(b.0));
    assemble(parse_many(&files, opts), prior, opts)
}

/// Parses each file on its own (on all cores when there are many), in the order given, and
/// gives namespaced objects without a namespace `opts`'s default ([`default_namespace`], on
/// the same cores): what [`parse_set`] does before [`assemble`]. A caller that keeps
/// [`FileResult`]s by blob id parses only the files that changed.
pub fn parse_many(files: &[(&str, &[u8])], opts: &Options) -> Vec<FileResult> {
    crate::par::map("parse_files", files, 64, |(p, b)| {
        let mut r = parse_file(p, b);
        for declared in &mut r.objects {
            default_namespace(&mut declared.object, opts);
            // The key is made here, while the object is in this core's cache, and kept with it
            // ([`Object::key`]): [`assemble`] then reads only the key of each object.
            declared.object.key();
        }
        r
    })
}

/// Gives a namespaced object without a namespace the default one (`opts.default_namespace`),
/// as `kubectl apply` does with its context's namespace. [`assemble`] does it; a caller that
/// keeps [`FileResult`]s across passes does it once on the fresh ones, before sharing them
/// (an object shared with a cache would be copied to be changed).
pub fn default_namespace(obj: &mut Object, opts: &Options) {
    if lacks_namespace(obj.group(), obj.kind(), obj.namespace()) {
        obj.set_namespace(&opts.default_namespace);
    }
}

/// True for an object of a namespaced kind that declares no namespace.
fn lacks_namespace(group: &str, kind: &str, namespace: &str) -> bool {
    namespace.is_empty() && !object::is_cluster_scoped(group, kind)
}

/// Builds a desired set from per-file results given in path order: namespaces defaulted, and
/// an object declared twice is an error naming both places.
pub fn assemble(
    results: impl IntoIterator<Item = FileResult>,
    prior: Vec<Diagnostic>,
    opts: &Options,
) -> DesiredSet {
    let mut set = DesiredSet {
        diagnostics: prior,
        ..DesiredSet::default()
    };
    // Every object with its key, its place in reading order, and where in the diagnostics a
    // second declaration's error goes (after its file's own); sorted by key (stably: the first
    // declaration first), the map is then built in one pass rather than a search per object.
    let mut all: Vec<(ObjectKey, Declared, usize, usize)> = Vec::new();
    for parsed in results {
        set.files += 1;
        set.skipped += parsed.skipped;
        set.diagnostics.extend(parsed.diagnostics);
        let at = set.diagnostics.len();
        all.reserve(parsed.objects.len());
        for mut declared in parsed.objects {
            // Judged by the key, kept with the object when it was made on the parse's threads
            // ([`parse_many`]): reading the object itself here, once per object, missed the
            // cache (9 ms at 10,000 objects).
            let mut key = declared.object.key();
            if lacks_namespace(key.group(), key.kind(), key.namespace()) {
                default_namespace(&mut declared.object, opts);
                key = declared.object.key();
            }
            all.push((key, declared, at, all.len()));
        }
    }
    // Unstable, with the reading order deciding between equal keys: the stable order, with
    // fewer moves of these large entries.
    all.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.3.cmp(&b.3)));
    let mut twice: Vec<(usize, usize, Diagnostic)> = Vec::new();
    let mut kept: Vec<(ObjectKey, Declared)> = Vec::with_capacity(all.len());
    for (key, declared, at, seq) in all {
        match kept.last() {
            Some((k, first)) if *k == key => twice.push((
                at,
                seq,
                Diagnostic::error(
                    &declared.path,
                    declared.line,
                    declared.column,
                    format!(
                        "{key} is declared twice: here and at {}:{}:{}; keep one of them",
                        first.path, first.line, first.column
                    ),
                ),
            )),
            _ => kept.push((key, declared)),
        }
    }
    // Each error where reading order put it: after its file's diagnostics, in the order its
    // objects were read (inserted last to first at each place).
    twice.sort_by_key(|(at, seq, _)| std::cmp::Reverse((*at, *seq)));
    for (at, _, d) in twice {
        set.diagnostics.insert(at, d);
    }
    set.objects = kept.into_iter().collect();
    set
}

/// What one file gave.
#[derive(Clone, Debug, Default)]
pub struct FileResult {
    /// Objects, in document order; namespaces not yet defaulted ([`parse_file`]) or
    /// defaulted ([`parse_many`]).
    pub objects: Vec<Declared>,
    /// Warnings and errors.
    pub diagnostics: Vec<Diagnostic>,
    /// Documents skipped with a warning.
    pub skipped: usize,
}

/// How strictly a file is read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Declarations from Git: every rule of ARCHITECTURE.md section 5; a duplicate key is an error.
    #[default]
    Git,
    /// Objects as a cluster or a store dumped them (`driftless health -f`, `diff --live`):
    /// a duplicate key is a warning and the last value is used, as Kubernetes' own YAML reader
    /// does. Every other rule holds.
    Live,
    /// The output of a renderer (`kustomize build`, `helm template`): read the way kubectl
    /// reads YAML (`sigs.k8s.io/yaml`, YAML 1.1 scalars as go-yaml v2 resolves them), since that
    /// is what the chart's or overlay's authors tested with: an unquoted `0644` is the octal
    /// number 420, `0o17` is 15, `1_000` is 1000, `yes`/`no`/`on`/`off`/`y`/`n` are booleans
    /// ([`yaml11_scalar`]). The ambiguity errors of [`Mode::Git`] do not apply; every other
    /// rule does (a duplicate key is an error, label values must be strings).
    Rendered,
}

/// Parses one file: every document becomes an object, a skip with a warning, or an error.
///
/// A file with a YAML syntax error gives one error at the place the parser stopped and no
/// objects. Invalid UTF-8 is an error naming the byte offset. A leading byte-order mark is
/// dropped; CRLF line endings are read as LF.
pub fn parse_file(path: &str, bytes: &[u8]) -> FileResult {
    parse_file_with(path, bytes, Mode::Git)
}

/// What a file named like `path` says about its folder when it has to be rendered before
/// it can be applied: a Kustomize overlay (`kustomization.yaml`, `kustomization.yml` or
/// `Kustomization`, the names `kustomize build` looks for) or a Helm chart (`Chart.yaml`).
fn needs_rendering(path: &str) -> Option<&'static str> {
    match path.rsplit('/').next().unwrap_or(path) {
        "kustomization.yaml" | "kustomization.yml" | "Kustomization" => {
            Some("a Kustomize overlay (kustomization file)")
        }
        "Chart.yaml" => Some("a Helm chart (Chart.yaml)"),
        _ => None,
    }
}

/// [`parse_file`] with a choice of [`Mode`].
pub fn parse_file_with(path: &str, bytes: &[u8], mode: Mode) -> FileResult {
    let mut out = FileResult::default();
    if mode == Mode::Git
        && let Some(what) = needs_rendering(path)
    {
        out.diagnostics.push(Diagnostic::error(
            path,
            1,
            1,
            format!(
                "{what}: its folder is rendered (`kustomize build`, `helm template`), never read file by file; validate or sync the folder instead of this file; nothing applied"
            ),
        ));
        return out;
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let offset = e.valid_up_to();
            let (line, column) = crate::yaml::line_column(&bytes[..offset]);
            out.diagnostics.push(Diagnostic::error(
                path,
                line,
                column,
                format!("invalid UTF-8 at byte offset {offset}; save the file as UTF-8"),
            ));
            return out;
        }
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if path.ends_with(".json")
        && let Some((line, column, message)) = json_syntax_error(text)
    {
        out.diagnostics
            .push(Diagnostic::error(path, line, column, message));
        return out;
    }
    let docs = match parse_documents(text, mode) {
        Ok(docs) => docs,
        Err((line, column, message)) => {
            // The parser stopped before any document was known: in a file that holds a
            // Secret, the value it quotes may be the Secret's.
            let message = if holds_secret(text) {
                hide_quoted_values(&message)
            } else {
                message
            };
            out.diagnostics
                .push(Diagnostic::error(path, line, column, message));
            return out;
        }
    };
    let mut ctx = Ctx {
        path,
        src: text,
        out: &mut out,
        errors: 0,
        mode,
        secret: false,
        quiet: false,
    };
    if docs.is_empty() {
        ctx.out.skipped += 1;
        ctx.warning(
            (1, 1),
            "skipped: the file holds no documents (it is empty or only comments)",
        );
    }
    for doc in docs {
        ctx.document(doc, false);
    }
    // Only a file this large can hold an object this large (alias expansion is budgeted).
    if mode != Mode::Live && text.len() > MAX_OBJECT_BYTES {
        let mut kept = Vec::with_capacity(out.objects.len());
        for d in std::mem::take(&mut out.objects) {
            let size = d.object.to_json().len();
            if size > MAX_OBJECT_BYTES {
                out.diagnostics.push(Diagnostic::error(
                    path,
                    d.line,
                    d.column,
                    format!(
                        "{} is {size} bytes as JSON, more than the {MAX_OBJECT_BYTES} bytes the Kubernetes API server accepts for one object (etcd's request limit); split it",
                        d.object.key()
                    ),
                ));
            } else {
                kept.push(d);
            }
        }
        out.objects = kept;
    }
    // In reading order, whichever check found them.
    out.diagnostics.sort_by_key(|d| (d.line, d.column));
    out
}

/// The largest object accepted, as JSON: 1.5 MiB, etcd's default `--max-request-bytes`, which
/// bounds what a Kubernetes API server stores in one object (a ConfigMap's data is limited to
/// 1 MiB). A larger one could never be applied to Kubernetes, and would cost every pass of the
/// agent its size several times over.
pub const MAX_OBJECT_BYTES: usize = 1_572_864;

/// Mappings of at most this many keys are searched in order for a key declared twice
/// ([`Ctx::json_of`]); larger ones by hash.
const SCAN_KEYS: usize = 8;

/// True when a line of `text` declares `kind: Secret` (YAML or JSON spelling), so that errors
/// found before the document is known must not quote values.
fn holds_secret(text: &str) -> bool {
    text.match_indices("kind").any(|(i, _)| {
        let before = text[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            return false; // `subkind`, `my_kind`
        }
        let rest = text[i + 4..].trim_start_matches(['"', '\'']).trim_start();
        let Some(rest) = rest.strip_prefix(':') else {
            return false;
        };
        let rest = rest.trim_start().trim_start_matches(['"', '\'']);
        rest.starts_with("Secret")
            && !rest[6..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
    })
}

/// `message` with every value it quotes in backticks replaced by `(hidden)`; a duplicate key's
/// message names a key, not a value, and is kept.
fn hide_quoted_values(message: &str) -> String {
    if message.starts_with("duplicate key") {
        return message.to_string();
    }
    let mut out = String::new();
    let mut parts = message.split('`');
    if let Some(first) = parts.next() {
        out.push_str(first);
    }
    for (i, part) in parts.enumerate() {
        if i % 2 == 0 {
            out.push_str("(hidden)");
        } else {
            out.push_str(part);
        }
    }
    format!("{out} (in a file that holds a Secret, values are not shown)")
}

/// A JSON file is read by the YAML parser (for positions and the duplicate-key check), but JSON
/// that is not JSON (comments, trailing commas) would read as some other YAML: check it as
/// JSON first and say what is wrong in JSON's terms. Every value of the file is checked.
fn json_syntax_error(text: &str) -> Option<(u64, u64, String)> {
    let stream = serde_json::Deserializer::from_str(text).into_iter::<serde::de::IgnoredAny>();
    for value in stream {
        if let Err(e) = value {
            let raw = e.to_string();
            let message = match raw.rfind(" at line ") {
                Some(i) => raw[..i].to_string(),
                None => raw,
            };
            return Some((
                (e.line() as u64).max(1),
                (e.column() as u64).max(1),
                format!("invalid JSON: {message}"),
            ));
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// From the tree to objects, with the section 5 checks.

struct Ctx<'a> {
    path: &'a str,
    src: &'a str,
    out: &'a mut FileResult,
    /// Errors reported so far (kept as a count: re-counting per document is quadratic).
    errors: usize,
    mode: Mode,
    /// The document being converted is a Secret: no diagnostic quotes one of its values.
    secret: bool,
    /// Errors are not reported (a part already found wrong is read again for its warnings).
    quiet: bool,
}

fn pos(node: &Node) -> (u64, u64) {
    (u64::from(node.line.max(1)), u64::from(node.column.max(1)))
}

fn map_get<'n>(entries: &'n [(Node, Node)], key: &str) -> Option<&'n (Node, Node)> {
    entries
        .iter()
        .find(|(k, _)| matches!(&k.value, NodeKind::Str(s) if s == key))
}

/// One step of a field path: a key, every value of a map, every item of a list.
#[derive(Clone, Copy)]
enum Step {
    Key(&'static str),
    Values,
    Each,
}

/// One part of a field path as walked: a key or a list index.
#[derive(Clone, Copy)]
enum Part<'n> {
    Key(&'n str),
    Index(usize),
}

/// A walked field path as written in messages (`spec.containers[0].args[1]`, `data.version`).
fn field_path(parts: &[Part<'_>]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for part in parts {
        match part {
            Part::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Part::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
        }
    }
    out
}

/// Calls `found` with each node at `path` under `node` and the parts of its field path
/// (`at` holds the parts walked so far; [`field_path`] writes them, only when a message
/// needs them: most nodes walked are fine, and their paths are never written).
fn walk_steps<'n>(
    node: &'n Node,
    path: &[Step],
    at: &mut Vec<Part<'n>>,
    found: &mut impl FnMut(&[Part<'n>], &'n Node),
) {
    let Some((step, rest)) = path.split_first() else {
        found(at, node);
        return;
    };
    match (step, &node.value) {
        (Step::Key(k), NodeKind::Map(entries)) => {
            if let Some((_, v)) = map_get(entries, k) {
                at.push(Part::Key(k));
                walk_steps(v, rest, at, found);
                at.pop();
            }
        }
        (Step::Values, NodeKind::Map(entries)) => {
            for (k, v) in entries {
                if let NodeKind::Str(k) = &k.value {
                    at.push(Part::Key(k));
                    walk_steps(v, rest, at, found);
                    at.pop();
                }
            }
        }
        (Step::Each, NodeKind::Seq(items)) => {
            for (i, v) in items.iter().enumerate() {
                at.push(Part::Index(i));
                walk_steps(v, rest, at, found);
                at.pop();
            }
        }
        _ => {}
    }
}

fn node_type(kind: &NodeKind) -> &'static str {
    match kind {
        NodeKind::Null => "null",
        NodeKind::Bool(_) => "a boolean",
        NodeKind::Int(_) | NodeKind::UInt(_) | NodeKind::Float(_) => "a number",
        NodeKind::Str(_) => "a string",
        NodeKind::Seq(_) => "a list",
        NodeKind::Map(_) => "a mapping",
    }
}

/// Validation rules for `metadata.name` by kind (Kubernetes apimachinery `validation`).
enum NameRule {
    /// RFC 1123 label: at most 63 characters, `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
    Label,
    /// RFC 1123 subdomain: at most 253 characters, labels joined by dots.
    Subdomain,
    /// Path segment: anything but `/` and `%`, and not `.` or `..` (RBAC kinds).
    PathSegment,
}

fn name_rule(group: &str, kind: &str) -> NameRule {
    match (group, kind) {
        ("", "Namespace") | ("", "Service") => NameRule::Label,
        (
            "rbac.authorization.k8s.io",
            "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding",
        ) => NameRule::PathSegment,
        _ => NameRule::Subdomain,
    }
}

impl Ctx<'_> {
    /// Reports an error at `at`, unless one is already reported there: every check runs on
    /// every document (a file's errors come in one round), and the first check to find a
    /// value wrong has the more specific message (`0755`'s number spelling before "must be a
    /// string").
    fn error(&mut self, at: (u64, u64), message: impl Into<String>) {
        if self.quiet
            || self
                .out
                .diagnostics
                .iter()
                .any(|d| d.is_error() && d.line == at.0 && d.column == at.1)
        {
            return;
        }
        self.errors += 1;
        self.out
            .diagnostics
            .push(Diagnostic::error(self.path, at.0, at.1, message));
    }

    fn warning(&mut self, at: (u64, u64), message: impl Into<String>) {
        self.out
            .diagnostics
            .push(Diagnostic::warning(self.path, at.0, at.1, message));
    }

    /// The source text of a scalar node where it was defined (through aliases).
    fn raw<'s>(&'s self, node: &Node) -> Option<&'s str> {
        node.raw(self.src)
    }

    /// One document (or one item of a `List`): an object, a skip, or errors.
    fn document(&mut self, doc: Node, in_list: bool) {
        let at = pos(&doc);
        let NodeKind::Map(entries) = &doc.value else {
            if in_list {
                self.error(
                    at,
                    format!(
                        "a List item must be a mapping, not {}",
                        node_type(&doc.value)
                    ),
                );
            } else if matches!(doc.value, NodeKind::Seq(_)) {
                // A list document is another tool's file (an Ansible playbook, say).
                self.out.skipped += 1;
                self.warning(at, "skipped: the document is a list, not an object");
            } else {
                // A lone scalar is almost always a manifest that lost its `:`s; skipping it
                // would prune its object.
                self.error(
                    at,
                    format!(
                        "the document is {}, not a mapping (a missing `:` after a key?)",
                        node_type(&doc.value)
                    ),
                );
            }
            return;
        };
        let api_version = map_get(entries, "apiVersion");
        let kind = map_get(entries, "kind");
        match (api_version, kind) {
            (None, None) => {
                self.out.skipped += 1;
                self.warning(
                    at,
                    "skipped: no `apiVersion` and `kind`, so not an object (Helm values, kustomization.yaml or CI files look like this)",
                );
                return;
            }
            (None, Some(_)) => {
                self.error(
                    at,
                    "`apiVersion` is missing; an object needs both `apiVersion` and `kind` (a document with neither is skipped)",
                );
                return;
            }
            (Some(_), None) => {
                self.error(
                    at,
                    "`kind` is missing; an object needs both `apiVersion` and `kind` (a document with neither is skipped)",
                );
                return;
            }
            (Some(_), Some(_)) => {}
        }
        let errors_before = self.error_count();
        // Identity fields must be strings (an unrendered template is not).
        for (field, entry) in [("apiVersion", api_version), ("kind", kind)] {
            if let Some((_, v)) = entry {
                self.expect_identity_string(field, v);
            }
        }
        if self.error_count() > errors_before {
            return;
        }
        let api_version_s = string_of(api_version);
        let kind_s = string_of(kind);
        if api_version_s.starts_with("kustomize.config.k8s.io/") {
            self.error(
                at,
                format!("{kind_s} ({api_version_s}) configures kustomize and is not an object: name the file `kustomization.yaml` so that its folder is built with `kustomize build`; nothing applied"),
            );
            return;
        }
        // A wrong identity is reported, and the rest of the document is still checked (its
        // other errors come in the same round); it never becomes an object.
        let identity_ok = match identity_problem(&api_version_s, &kind_s) {
            Some((field, problem)) => {
                let node = if field == "kind" { kind } else { api_version };
                let at = node.map_or(at, |(_, v)| pos(v));
                self.error(at, problem);
                false
            }
            None => true,
        };
        let group_s = api_version_s.rsplit_once('/').map_or("", |(g, _)| g);
        if identity_ok && let Some((is_error, problem)) = built_in_kind_problem(group_s, &kind_s) {
            let at = kind.map_or(at, |(_, v)| pos(v));
            if is_error {
                self.error(at, problem);
            } else {
                self.warning(at, problem);
            }
        }
        // A List holds objects in `items` (kubectl's `v1/List` and `*List` kinds).
        if kind_s.ends_with("List")
            && !in_list
            && let Some(i) = entries
                .iter()
                .position(|(k, _)| matches!(&k.value, NodeKind::Str(s) if s == "items"))
        {
            let NodeKind::Map(mut entries) = doc.value else {
                unreachable!("a mapping, checked above")
            };
            let items = entries.swap_remove(i).1;
            match items.value {
                NodeKind::Seq(list) => {
                    for item in list {
                        self.document(item, true);
                    }
                }
                NodeKind::Null => {}
                ref other => self.error(
                    pos(&items),
                    format!(
                        "`items` of a {kind_s} must be a list, not {}",
                        node_type(other)
                    ),
                ),
            }
            return;
        }
        let group = api_version_s
            .rsplit_once('/')
            .map_or("", |(g, _)| g)
            .to_string();
        // Every check runs, so a file's errors are reported in one round; an error at a
        // position already reported is not repeated (see `error`).
        self.secret = group.is_empty() && kind_s == "Secret";
        let before_metadata = self.error_count();
        self.check_metadata(&doc, entries, &group, &kind_s);
        // Reported after the number checks below, so that an ambiguous `0755` keeps its own,
        // better message (one error per place); found first, while the tree is whole.
        let not_strings = self.check_string_fields(&doc, &group, &kind_s);
        let value = if self.error_count() > before_metadata {
            // The rest of the document is still checked; metadata, already found wrong, is
            // read again for its warnings only (an unrendered `{{ x }}` would be reported
            // twice).
            let NodeKind::Map(entries) = doc.value else {
                unreachable!("a mapping, checked above")
            };
            for (k, v) in entries {
                self.quiet = matches!(&k.value, NodeKind::Str(key) if key == "metadata");
                self.key_string(k);
                self.json_of(v);
                self.quiet = false;
            }
            None
        } else {
            self.json_of(doc)
        };
        for (at, message) in not_strings {
            self.error(at, message);
        }
        self.secret = false;
        if self.error_count() > errors_before {
            return;
        }
        let Some(value) = value else {
            return;
        };
        match Object::from_value(value) {
            Ok(object) => self.out.objects.push(Declared {
                object,
                path: self.path.to_string(),
                line: at.0,
                column: at.1,
            }),
            Err(e) => self.error(at, e.to_string()),
        }
    }

    fn error_count(&self) -> usize {
        self.errors
    }

    fn expect_identity_string(&mut self, field: &str, v: &Node) {
        if !matches!(v.value, NodeKind::Str(_)) {
            let hint = if matches!(v.value, NodeKind::Map(_)) {
                " (an unrendered template such as `{{ .Values.x }}` reads as a mapping; render it first)"
            } else {
                ""
            };
            self.error(
                pos(v),
                format!(
                    "`{field}` must be a string, not {}{hint}",
                    node_type(&v.value)
                ),
            );
        }
    }

    /// Fields of the built-in kinds the Kubernetes API types as strings, where YAML 1.2 reads
    /// an unquoted `1e3`, `0x1F`, `1.20` or `true` as a number or a boolean: an error at the
    /// value with the quoted form to write (the value is never changed). Secrets' values are
    /// not quoted back.
    /// (place, message) of each such value, for the caller to report.
    fn check_string_fields(
        &self,
        doc: &Node,
        group: &str,
        kind: &str,
    ) -> Vec<((u64, u64), String)> {
        use Step::{Each, Key, Values};
        let pod_spec: &[Step] = match (group, kind) {
            ("", "Pod") => &[Key("spec")],
            ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")
            | ("batch", "Job")
            | ("", "ReplicationController" | "PodTemplate") => {
                &[Key("spec"), Key("template"), Key("spec")]
            }
            ("batch", "CronJob") => &[
                Key("spec"),
                Key("jobTemplate"),
                Key("spec"),
                Key("template"),
                Key("spec"),
            ],
            _ => &[],
        };
        // The kind's own fields, from the object's root.
        let own: &[&[Step]] = match (group, kind) {
            ("", "ConfigMap") => &[&[Key("data"), Values], &[Key("binaryData"), Values]],
            ("", "Secret") => &[&[Key("data"), Values], &[Key("stringData"), Values]],
            ("", "Service") => &[
                &[Key("spec"), Key("selector"), Values],
                &[Key("spec"), Key("ports"), Each, Key("name")],
            ],
            _ => &[],
        };
        // A pod spec's, each container's (in the order the fields are listed, then the
        // containers'), from the pod spec and each container found once: walked from the root,
        // the way down to them was walked again for each of twenty fields.
        const POD_SPEC: &[&[Step]] =
            &[&[Key("nodeSelector"), Values], &[Key("serviceAccountName")]];
        const CONTAINER: &[&[Step]] = &[
            &[Key("image")],
            &[Key("workingDir")],
            &[Key("ports"), Each, Key("name")],
            &[Key("command"), Each],
            &[Key("args"), Each],
            &[Key("env"), Each, Key("value")],
        ];
        let secret = group.is_empty() && kind == "Secret";
        let mut found = Vec::new();
        let mut check = |parts: &[Part<'_>], node| {
            if let Some(what) = self.not_a_string(node) {
                found.push((field_path(parts), node, what));
            }
        };
        let mut at = Vec::new();
        for path in own {
            walk_steps(doc, path, &mut at, &mut check);
        }
        if !pod_spec.is_empty() {
            walk_steps(doc, pod_spec, &mut at, &mut |to_spec, spec| {
                let mut at = to_spec.to_vec();
                for path in POD_SPEC {
                    walk_steps(spec, path, &mut at, &mut check);
                }
                for list in ["containers", "initContainers", "ephemeralContainers"] {
                    let mut containers = Vec::new();
                    walk_steps(spec, &[Key(list), Each], &mut at, &mut |to, c| {
                        containers.push((to.to_vec(), c));
                    });
                    for path in CONTAINER {
                        for (to, container) in &containers {
                            let mut at = to.clone();
                            walk_steps(container, path, &mut at, &mut check);
                        }
                    }
                }
            });
        }
        found
            .into_iter()
            .map(|(field, node, what)| {
                let hint = if secret {
                    ": quote the value (not shown: this is a Secret)".to_string()
                } else {
                    let raw = self.raw(node).unwrap_or("").trim();
                    format!(": write it quoted, `\"{raw}\"`")
                };
                (
                    pos(node),
                    format!(
                        "`{field}` must be a string (the Kubernetes API types it so), not {what}{hint}"
                    ),
                )
            })
            .collect()
    }

    fn check_metadata(&mut self, doc: &Node, entries: &[(Node, Node)], group: &str, kind: &str) {
        let Some((_, meta)) = map_get(entries, "metadata") else {
            self.error(
                pos(doc),
                format!("{kind} has no `metadata`; `metadata.name` is required"),
            );
            return;
        };
        let NodeKind::Map(meta_entries) = &meta.value else {
            self.error(
                pos(meta),
                format!(
                    "`metadata` must be a mapping, not {}",
                    node_type(&meta.value)
                ),
            );
            return;
        };
        match map_get(meta_entries, "name") {
            None
            | Some((
                _,
                Node {
                    value: NodeKind::Null,
                    ..
                },
            )) => {
                if map_get(meta_entries, "generateName").is_some() {
                    self.error(
                        pos(meta),
                        "`metadata.generateName` without `metadata.name` is not supported: a generated name would create a new object on every sync; set `metadata.name`",
                    );
                } else {
                    self.error(pos(meta), format!("{kind} has no `metadata.name`"));
                }
            }
            Some((_, name)) => {
                self.expect_identity_string("metadata.name", name);
                if let NodeKind::Str(s) = &name.value {
                    let problem = match name_rule(group, kind) {
                        NameRule::Label => object::dns1123_label_error(s),
                        NameRule::Subdomain => object::dns1123_subdomain_error(s),
                        NameRule::PathSegment => object::path_segment_error(s),
                    };
                    if let Some(p) = problem {
                        self.error(pos(name), format!("invalid metadata.name `{s}`: {p}"));
                    }
                }
            }
        }
        if let Some((_, ns)) = map_get(meta_entries, "namespace") {
            match &ns.value {
                NodeKind::Null => {}
                NodeKind::Str(s) => {
                    if let Some(p) = object::dns1123_label_error(s) {
                        self.error(pos(ns), format!("invalid metadata.namespace `{s}`: {p}"));
                    }
                }
                _ => self.expect_identity_string("metadata.namespace", ns),
            }
        }
        for field in ["labels", "annotations"] {
            let Some((_, node)) = map_get(meta_entries, field) else {
                continue;
            };
            let map = match &node.value {
                NodeKind::Null => continue,
                NodeKind::Map(m) => m,
                other => {
                    self.error(
                        pos(node),
                        format!(
                            "`metadata.{field}` must be a mapping, not {}",
                            node_type(other)
                        ),
                    );
                    continue;
                }
            };
            for (k, v) in map {
                let key = match &k.value {
                    NodeKind::Str(s) => s.clone(),
                    _ => {
                        let raw = self.raw(k).unwrap_or("?").to_string();
                        self.error(
                            pos(k),
                            format!("{field} key `{raw}` must be a string; quote it"),
                        );
                        continue;
                    }
                };
                if let Some(p) = object::qualified_name_error(&key) {
                    self.error(pos(k), format!("invalid {field} key `{key}`: {p}"));
                }
                match &v.value {
                    NodeKind::Str(_) if self.not_a_string(v).is_some() => {
                        let raw = self.raw(v).unwrap_or("").trim();
                        let singular = &field[..field.len() - 1];
                        self.error(
                            pos(v),
                            format!(
                                "value of {singular} `{key}` must be a string, not {} as kubectl reads it (YAML 1.1): write `{key}: \"{raw}\"`",
                                self.not_a_string(v).unwrap_or_default()
                            ),
                        );
                    }
                    NodeKind::Str(s) => {
                        if field == "labels"
                            && let Some(p) = object::label_value_error(s)
                        {
                            self.error(pos(v), format!("invalid value of label `{key}`: {p}"));
                        }
                    }
                    other => {
                        let singular = &field[..field.len() - 1];
                        let hint = match other {
                            NodeKind::Seq(_) | NodeKind::Map(_) => String::new(),
                            _ => {
                                let raw = self.raw(v).unwrap_or("").trim();
                                format!(": write `{key}: \"{raw}\"`")
                            }
                        };
                        self.error(
                            pos(v),
                            format!(
                                "value of {singular} `{key}` must be a string, not {}{hint}",
                                node_type(other)
                            ),
                        );
                    }
                }
            }
        }
    }

    /// Converts a node to JSON, reporting ambiguous legacy numbers and non-scalar keys.
    /// `None` when an error was reported. The node is taken apart: its strings become the
    /// JSON's (moved, not copied).
    fn json_of(&mut self, node: Node) -> Option<Value> {
        match node.value {
            NodeKind::Seq(items) => {
                let mut out = Vec::with_capacity(items.len());
                let mut ok = true;
                for item in items {
                    match self.json_of(item) {
                        Some(v) => out.push(v),
                        None => ok = false,
                    }
                }
                ok.then_some(Value::Array(out))
            }
            NodeKind::Map(entries) => {
                let mut out = Map::with_capacity(entries.len());
                let mut ok = true;
                for (k, v) in entries {
                    let at = pos(&k);
                    let Some(key) = self.key_string(k) else {
                        ok = false;
                        continue;
                    };
                    // A mapping of a few keys is searched in order: hashing the key (SipHash,
                    // serde_json's ordered mapping) cost more than comparing it with each.
                    let twice = if out.len() <= SCAN_KEYS {
                        out.keys().any(|k| *k == key)
                    } else {
                        out.contains_key(&key)
                    };
                    if twice {
                        if self.mode == Mode::Live {
                            self.warning(
                                at,
                                format!("duplicate key `{key}`: the last value is used"),
                            );
                            out.shift_remove(&key);
                        } else {
                            self.error(
                                at,
                                format!("duplicate key `{key}` (two keys that read as the same text, such as `1` and `\"1\"`)"),
                            );
                            ok = false;
                            continue;
                        }
                    }
                    match self.json_of(v) {
                        Some(v) => {
                            out.insert(key, v);
                        }
                        None => ok = false,
                    }
                }
                ok.then_some(Value::Object(out))
            }
            value => self.scalar_json(Node { value, ..node }),
        }
    }

    /// [`Self::json_of`] of a scalar.
    fn scalar_json(&mut self, node: Node) -> Option<Value> {
        Some(match &node.value {
            NodeKind::Null => Value::Null,
            NodeKind::Bool(b) => Value::Bool(*b),
            NodeKind::Int(_) | NodeKind::UInt(_) | NodeKind::Float(_)
                if self.mode == Mode::Rendered
                    && let Some(v) = self.raw(&node).and_then(|r| yaml11_scalar(r.trim())) =>
            {
                self.finite(&node, v)?
            }
            NodeKind::Int(_) | NodeKind::UInt(_) | NodeKind::Float(_) => {
                self.check_number_spelling(&node)?;
                match node.value {
                    NodeKind::Int(i) => Value::from(i),
                    NodeKind::UInt(u) => Value::from(u),
                    NodeKind::Float(_) if self.raw(&node).is_some_and(is_integer_spelling) => {
                        let raw = self.shown(self.raw(&node).unwrap_or_default().trim());
                        self.error(
                            pos(&node),
                            format!(
                                "integer {raw} does not fit in 64 bits; quote it to keep it as text"
                            ),
                        );
                        return None;
                    }
                    NodeKind::Float(f) => match Number::from_f64(f) {
                        Some(n) => Value::Number(n),
                        None => {
                            self.error(pos(&node), "a number must be finite");
                            return None;
                        }
                    },
                    _ => unreachable!("matched above"),
                }
            }
            NodeKind::Str(s)
                if self.mode == Mode::Rendered
                    && self.plain(&node, s)
                    && let Some(v) = yaml11_scalar(s) =>
            {
                self.finite(&node, v)?
            }
            NodeKind::Str(_) => {
                if self.mode == Mode::Git
                    && let Some(raw) = self.raw(&node).map(str::trim)
                    && let Some(b) = yaml11_bool(raw)
                {
                    let message = if self.secret {
                        format!(
                            "a Secret's value (not shown) stays a string (YAML 1.2), but kubectl and other YAML 1.1 readers read it as the boolean {b}; quote it to keep a string"
                        )
                    } else {
                        format!(
                            "`{raw}` stays the string \"{raw}\" (YAML 1.2), but kubectl and other YAML 1.1 readers read it as the boolean {b}; write `\"{raw}\"` to keep a string or `{b}` for a boolean"
                        )
                    };
                    self.warning(pos(&node), message);
                }
                // Moved out of the node, not copied.
                let NodeKind::Str(s) = node.value else {
                    unreachable!("matched a string")
                };
                return Some(Value::String(s));
            }
            NodeKind::Seq(_) | NodeKind::Map(_) => unreachable!("collections are read by json_of"),
        })
    }

    /// A mapping key as JSON needs it: strings as they are, other scalars as their YAML text
    /// (as `sigs.k8s.io/yaml` does), collections rejected.
    fn key_string(&mut self, k: Node) -> Option<String> {
        match &k.value {
            // kubectl reads an unquoted `yes:` key as the boolean, then writes it as `true`.
            NodeKind::Str(s)
                if self.mode == Mode::Rendered
                    && self.plain(&k, s)
                    && let Some(v @ (Value::Bool(_) | Value::Number(_))) = yaml11_scalar(s) =>
            {
                return Some(v.to_string());
            }
            NodeKind::Int(_) | NodeKind::UInt(_) | NodeKind::Float(_)
                if self.mode == Mode::Rendered =>
            {
                let raw = self.raw(&k).unwrap_or_default().trim().to_string();
                return Some(yaml11_scalar(&raw).map_or(raw, |v| v.to_string()));
            }
            NodeKind::Str(_) => {
                // Not `y`/`n`: one-letter keys (coordinates) are common, and rarely meant as
                // booleans by anyone.
                if self.mode == Mode::Git
                    && let Some(raw) = self.raw(&k).map(str::trim)
                    && raw.len() > 1
                    && let Some(b) = yaml11_bool(raw)
                {
                    self.warning(
                        pos(&k),
                        format!("key `{raw}` stays the string \"{raw}\" (YAML 1.2), but kubectl and other YAML 1.1 readers read it as the boolean {b} (the key `{b}`); write `\"{raw}\":` to keep it"),
                    );
                }
            }
            NodeKind::Null => return Some("null".into()),
            NodeKind::Bool(b) => return Some(b.to_string()),
            NodeKind::Int(_) | NodeKind::UInt(_) | NodeKind::Float(_) => {
                self.check_number_spelling(&k)?;
                return Some(self.raw(&k).unwrap_or_default().trim().to_string());
            }
            NodeKind::Seq(_) | NodeKind::Map(_) => {
                let hint = if matches!(k.value, NodeKind::Map(_)) {
                    " (an unrendered template such as `{{ .Values.x }}` reads as a mapping; render it first)"
                } else {
                    ""
                };
                self.error(
                    pos(&k),
                    format!("a mapping key must be a scalar, not a collection{hint}"),
                );
                return None;
            }
        }
        // A string as it is: moved out of the node, not copied.
        let NodeKind::Str(s) = k.value else {
            unreachable!("every other kind of key returned above")
        };
        Some(s)
    }

    /// Rejects number spellings that YAML 1.1 tools and YAML 1.2 read differently.
    fn check_number_spelling(&mut self, node: &Node) -> Option<()> {
        let Some(raw) = self.raw(node).map(str::trim) else {
            return Some(());
        };
        if let Some(problem) = ambiguous_number(raw) {
            let problem = if self.secret {
                "ambiguous number (a Secret's value, not shown): YAML 1.1 and YAML 1.2 tools read it differently; quote it to keep it as text".to_string()
            } else {
                problem
            };
            self.error(pos(node), problem);
            return None;
        }
        Some(())
    }

    /// What a scalar that is not a string is (`a number`, `a boolean`), as this mode reads it
    /// (in [`Mode::Rendered`], an unquoted `yes` is a boolean); `None` for a string or a
    /// collection.
    fn not_a_string(&self, node: &Node) -> Option<&'static str> {
        match &node.value {
            NodeKind::Bool(_) => Some("a boolean"),
            NodeKind::Int(_) | NodeKind::UInt(_) | NodeKind::Float(_) => Some("a number"),
            NodeKind::Str(s) if self.mode == Mode::Rendered && self.plain(node, s) => {
                match yaml11_scalar(s) {
                    Some(Value::Bool(_)) => Some("a boolean"),
                    Some(_) => Some("a number"),
                    None => None,
                }
            }
            _ => None,
        }
    }

    /// True when the string `value` of `node` was written as a plain scalar (no quotes, not a
    /// block scalar): only those are resolved by YAML 1.1's rules in [`Mode::Rendered`].
    fn plain(&self, node: &Node, value: &str) -> bool {
        self.raw(node).is_some_and(|raw| raw.trim() == value)
    }

    /// `v` as JSON, or an error at `node` when it is a float JSON cannot hold (`.inf`, `.nan`).
    fn finite(&mut self, node: &Node, v: Value) -> Option<Value> {
        match v {
            Value::Number(_) | Value::Bool(_) => Some(v),
            _ => {
                self.error(pos(node), "a number must be finite");
                None
            }
        }
    }

    /// A scalar's source text as a diagnostic may quote it: `` `raw` ``, or `(a Secret's value,
    /// not shown)` inside a Secret.
    fn shown(&self, raw: &str) -> String {
        if self.secret {
            "(a Secret's value, not shown)".to_string()
        } else {
            format!("`{raw}`")
        }
    }
}

/// The boolean YAML 1.1 (go-yaml v2, which `sigs.k8s.io/yaml` and so kubectl use) reads an
/// unquoted `yes`, `no`, `on`, `off`, `y` or `n` as (in the three spellings it accepts), where
/// YAML 1.2 reads a string. `None` for anything else, quoted text included.
fn yaml11_bool(raw: &str) -> Option<bool> {
    match raw {
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => Some(true),
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => Some(false),
        _ => None,
    }
}

/// What YAML 1.1, as go-yaml v2 resolves it (the reader of `sigs.k8s.io/yaml`, so of kubectl),
/// makes of the plain scalar `raw`: a boolean (`yes`, `No`, `on`, `y`, `true`, ...), an integer
/// (underscores dropped, then Go's `strconv.ParseInt(s, 0, 64)`: `0644` octal, `0o17`, `0x1F`,
/// `0b101`, a sign allowed), or a float (`1.5e3`, `0789`, `.inf`). `None` for anything else
/// (strings, `null`, `~`). A float JSON cannot hold comes back as `Value::Null`, for the caller
/// to refuse.
pub fn yaml11_scalar(raw: &str) -> Option<Value> {
    if let Some(b) = yaml11_bool(raw) {
        return Some(Value::Bool(b));
    }
    match raw {
        "true" | "True" | "TRUE" => return Some(Value::Bool(true)),
        "false" | "False" | "FALSE" => return Some(Value::Bool(false)),
        _ => {}
    }
    let first = raw.chars().next()?;
    if !(first.is_ascii_digit() || matches!(first, '+' | '-' | '.')) {
        return None;
    }
    let plain = raw.replace('_', "");
    let (negative, unsigned) = match plain.as_bytes().first() {
        Some(b'-') => (true, &plain[1..]),
        Some(b'+') => (false, &plain[1..]),
        _ => (false, plain.as_str()),
    };
    let (digits, radix) = if let Some(d) = unsigned
        .strip_prefix("0x")
        .or_else(|| unsigned.strip_prefix("0X"))
    {
        (d, 16)
    } else if let Some(d) = unsigned
        .strip_prefix("0o")
        .or_else(|| unsigned.strip_prefix("0O"))
    {
        (d, 8)
    } else if let Some(d) = unsigned
        .strip_prefix("0b")
        .or_else(|| unsigned.strip_prefix("0B"))
    {
        (d, 2)
    } else if unsigned.len() > 1 && unsigned.starts_with('0') {
        (&unsigned[1..], 8)
    } else {
        (unsigned, 10)
    };
    if !digits.is_empty()
        && !digits.starts_with(['+', '-'])
        && let Ok(u) = u64::from_str_radix(digits, radix)
    {
        if !negative {
            return Some(Value::from(u));
        }
        if let Ok(i) = i64::try_from(u) {
            return Some(Value::from(-i));
        }
        if u == 1 << 63 {
            return Some(Value::from(i64::MIN));
        }
    }
    // go-yaml v2's float pattern: `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`, and
    // `.inf`/`.nan` spellings.
    let lower = plain.to_ascii_lowercase();
    let inf = matches!(lower.trim_start_matches(['+', '-']), ".inf");
    if inf || lower == ".nan" {
        return Some(Value::Null);
    }
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(i) => (&unsigned[..i], Some(&unsigned[i + 1..])),
        None => (unsigned, None),
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some((int, frac)) => {
            (int.is_empty() && !frac.is_empty() && frac.bytes().all(|b| b.is_ascii_digit()))
                || (!int.is_empty()
                    && int.bytes().all(|b| b.is_ascii_digit())
                    && frac.bytes().all(|b| b.is_ascii_digit()))
        }
        None => !mantissa.is_empty() && mantissa.bytes().all(|b| b.is_ascii_digit()),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit())
    });
    if mantissa_ok && exponent_ok {
        let f: f64 = plain.parse().ok()?;
        return Some(Number::from_f64(f).map_or(Value::Null, Value::Number));
    }
    None
}

/// The kinds Kubernetes serves in its built-in API groups (`kubectl api-resources` on 1.33,
/// with `extensions` for old manifests): a kind these groups do not have is a typo or the
/// wrong group. `""` is the core group.
const BUILT_IN_KINDS: &[(&str, &[&str])] = &[
    (
        "",
        &[
            "Binding",
            "ComponentStatus",
            "ConfigMap",
            "Endpoints",
            "Event",
            "LimitRange",
            "Namespace",
            "Node",
            "PersistentVolume",
            "PersistentVolumeClaim",
            "Pod",
            "PodTemplate",
            "ReplicationController",
            "ResourceQuota",
            "Secret",
            "Service",
            "ServiceAccount",
        ],
    ),
    (
        "apps",
        &[
            "ControllerRevision",
            "DaemonSet",
            "Deployment",
            "ReplicaSet",
            "StatefulSet",
        ],
    ),
    ("batch", &["CronJob", "Job"]),
    ("autoscaling", &["HorizontalPodAutoscaler"]),
    (
        "policy",
        &["Eviction", "PodDisruptionBudget", "PodSecurityPolicy"],
    ),
    (
        "networking.k8s.io",
        &[
            "IPAddress",
            "Ingress",
            "IngressClass",
            "NetworkPolicy",
            "ServiceCIDR",
        ],
    ),
    (
        "rbac.authorization.k8s.io",
        &["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"],
    ),
    (
        "storage.k8s.io",
        &[
            "CSIDriver",
            "CSINode",
            "CSIStorageCapacity",
            "StorageClass",
            "VolumeAttachment",
            "VolumeAttributesClass",
        ],
    ),
    ("scheduling.k8s.io", &["PriorityClass"]),
    ("coordination.k8s.io", &["Lease", "LeaseCandidate"]),
    (
        "admissionregistration.k8s.io",
        &[
            "MutatingAdmissionPolicy",
            "MutatingAdmissionPolicyBinding",
            "MutatingWebhookConfiguration",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingWebhookConfiguration",
        ],
    ),
    ("apiextensions.k8s.io", &["CustomResourceDefinition"]),
    ("apiregistration.k8s.io", &["APIService"]),
    (
        "certificates.k8s.io",
        &["CertificateSigningRequest", "ClusterTrustBundle"],
    ),
    ("discovery.k8s.io", &["EndpointSlice"]),
    ("events.k8s.io", &["Event"]),
    ("node.k8s.io", &["RuntimeClass"]),
    (
        "flowcontrol.apiserver.k8s.io",
        &["FlowSchema", "PriorityLevelConfiguration"],
    ),
    (
        "resource.k8s.io",
        &[
            "DeviceClass",
            "DeviceTaintRule",
            "ResourceClaim",
            "ResourceClaimTemplate",
            "ResourceSlice",
        ],
    ),
    (
        "extensions",
        &[
            "DaemonSet",
            "Deployment",
            "Ingress",
            "NetworkPolicy",
            "PodSecurityPolicy",
            "ReplicaSet",
        ],
    ),
    (
        "authentication.k8s.io",
        &["SelfSubjectReview", "TokenReview"],
    ),
    (
        "authorization.k8s.io",
        &[
            "LocalSubjectAccessReview",
            "SelfSubjectAccessReview",
            "SelfSubjectRulesReview",
            "SubjectAccessReview",
        ],
    ),
];

/// Checks a kind of a built-in API group against the kinds Kubernetes serves there
/// ([`BUILT_IN_KINDS`]): `Some((true, message))` for an error (the right kind in the wrong
/// case: kinds are case-sensitive), `Some((false, message))` for a warning (a kind the group
/// does not have, with the likely one), `None` when it is known or the group is not built in
/// (custom resources are checked by the API server).
fn built_in_kind_problem(group: &str, kind: &str) -> Option<(bool, String)> {
    let (_, kinds) = BUILT_IN_KINDS.iter().find(|(g, _)| *g == group)?;
    let kind = kind
        .strip_suffix("List")
        .filter(|k| !k.is_empty())
        .unwrap_or(kind);
    if kind == "List" && group.is_empty() || kinds.contains(&kind) {
        return None;
    }
    let shown_group = if group.is_empty() {
        "the core group"
    } else {
        group
    };
    if let Some(right) = kinds.iter().find(|k| k.eq_ignore_ascii_case(kind)) {
        return Some((
            true,
            format!(
                "kind `{kind}` does not exist in {shown_group}: kinds are case-sensitive; write `{right}`"
            ),
        ));
    }
    // The same kind in another built-in group (`apps/v1` Service), or a near spelling.
    let elsewhere: Vec<String> = BUILT_IN_KINDS
        .iter()
        .filter(|(g, ks)| *g != "extensions" && ks.contains(&kind))
        .map(|(g, _)| {
            if g.is_empty() {
                "v1".to_string()
            } else {
                format!("{g}/v1")
            }
        })
        .collect();
    let hint = if let Some(api) = elsewhere.first() {
        format!("; {kind} is served as apiVersion `{api}`")
    } else if let Some(near) = kinds.iter().find(|k| edit_distance(k, kind) <= 2) {
        format!("; did you mean `{near}`?")
    } else {
        String::new()
    };
    Some((
        false,
        format!("kind `{kind}` does not exist in {shown_group} as Kubernetes serves it{hint}"),
    ))
}

/// Levenshtein distance between two short words.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// Checks the shape of `apiVersion` (`[group/]version`, the group an RFC 1123 subdomain, the
/// version lowercase letters and digits such as `v1beta1`) and `kind`, as the Kubernetes API
/// requires. A kind is what a CRD may declare: lowercased, a DNS-1035 label (letters, digits
/// and `-`, starting with a letter, ending with a letter or digit, at most 63 characters;
/// apiextensions' `ValidateCustomResourceDefinitionNames`), so the Zalando operator's
/// `postgresql` is a kind; a built-in kind in the wrong case is caught by
/// [`built_in_kind_problem`]. Returns the field at fault and why. Objects of
/// driftless's own group are refused: those records are the agent's, not Git's.
fn identity_problem(api_version: &str, kind: &str) -> Option<(&'static str, String)> {
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (Some(g), v),
        None => (None, api_version),
    };
    let version_ok = !version.is_empty()
        && version.starts_with(|c: char| c.is_ascii_lowercase())
        && version
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !version_ok {
        return Some((
            "apiVersion",
            format!(
                "invalid apiVersion `{api_version}`: write `group/version` or `version`, e.g. `apps/v1` or `v1`"
            ),
        ));
    }
    if let Some(g) = group {
        if let Some(p) = object::dns1123_subdomain_error(g) {
            return Some((
                "apiVersion",
                format!("invalid API group `{g}` in apiVersion `{api_version}`: {p}"),
            ));
        }
        // The core group has no name in an apiVersion: `core/v1` is refused by the API server
        // (no group `core`), and would slip past every rule written for the core kinds
        // (Secrets' masking, cluster scope).
        if g == "core" {
            return Some((
                "apiVersion",
                format!(
                    "invalid apiVersion `{api_version}`: the core API group has no name; write `{version}`"
                ),
            ));
        }
        if g == object::RESERVED_GROUP {
            return Some((
                "apiVersion",
                format!(
                    "the API group `{g}` holds driftless's own records (inventories, app status); it cannot be declared"
                ),
            ));
        }
    }
    let kind_ok = kind.len() <= 63
        && kind.starts_with(|c: char| c.is_ascii_alphabetic())
        && kind.ends_with(|c: char| c.is_ascii_alphanumeric())
        && kind.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if !kind_ok {
        let mut chars = kind.trim().chars();
        // A built-in kind in another case is named as it is spelled (`configmap`: ConfigMap).
        let known = BUILT_IN_KINDS
            .iter()
            .flat_map(|(_, ks)| ks.iter())
            .find(|k| k.eq_ignore_ascii_case(kind.trim()));
        let hint = known
            .map(|k| (*k).to_string())
            .or_else(|| {
                chars
                    .next()
                    .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
            })
            .filter(|h| h.chars().all(|c| c.is_ascii_alphanumeric()) && !h.is_empty())
            .map(|h| format!(", e.g. `{h}`"))
            .unwrap_or_default();
        return Some((
            "kind",
            format!(
                "invalid kind `{kind}`: a kind is letters, digits and `-`, starting with a letter and ending with a letter or digit, at most 63 characters{hint}"
            ),
        ));
    }
    None
}

fn string_of(entry: Option<&(Node, Node)>) -> String {
    match entry {
        Some((
            _,
            Node {
                value: NodeKind::Str(s),
                ..
            },
        )) => s.clone(),
        _ => String::new(),
    }
}

/// True for a plain decimal integer spelling (`123`, `-45`): read as a float only when it does
/// not fit in 64 bits.
fn is_integer_spelling(raw: &str) -> bool {
    let digits = raw.trim().trim_start_matches(['-', '+']);
    !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
}

/// Explains a plain number whose meaning differs between YAML 1.1 and YAML 1.2, or `None`.
///
/// - `0755`, `-012`: YAML 1.2 reads decimal 755; YAML 1.1 (PyYAML, Go's yaml.v2, kubectl of old)
///   reads octal 493.
/// - `0o755`: YAML 1.2 octal 493; YAML 1.1 reads the string `"0o755"`.
/// - `0b101`, `1_000`: YAML 1.1 integers; YAML 1.2 core reads strings.
pub fn ambiguous_number(raw: &str) -> Option<String> {
    let unsigned = raw.trim_start_matches(['-', '+']);
    let digits_only = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    if unsigned.len() > 1 && unsigned.starts_with('0') && digits_only(unsigned) {
        let sign = if raw.starts_with('-') { "-" } else { "" };
        let digits = unsigned.trim_start_matches('0');
        let decimal = format!("{sign}{}", if digits.is_empty() { "0" } else { digits });
        let numbers = match i64::from_str_radix(unsigned, 8) {
            // `007`: the same number either way.
            Ok(v) if format!("{sign}{v}") == decimal => {
                format!("`{decimal}` for the number (the same in both readings)")
            }
            Ok(v) => format!("`{decimal}` for the decimal value, `{sign}{v}` for the octal value"),
            Err(_) => format!("`{decimal}` for the decimal value"),
        };
        return Some(format!(
            "ambiguous number `{raw}`: YAML 1.2 reads it as decimal {decimal} but YAML 1.1 tools read a leading zero as octal; write `\"{raw}\"` for a string, {numbers}"
        ));
    }
    if let Some(rest) = unsigned.strip_prefix("0o")
        && !rest.is_empty()
    {
        let value = i64::from_str_radix(&rest.replace('_', ""), 8)
            .map(|v| v.to_string())
            .unwrap_or_else(|_| "?".into());
        return Some(format!(
            "ambiguous number `{raw}`: YAML 1.2 reads octal {value} but YAML 1.1 tools read a string; write `{value}` for the number or `\"{raw}\"` for a string"
        ));
    }
    if let Some(rest) = unsigned.strip_prefix("0b")
        && !rest.is_empty()
    {
        let value = i64::from_str_radix(&rest.replace('_', ""), 2)
            .map(|v| v.to_string())
            .unwrap_or_else(|_| "?".into());
        return Some(format!(
            "ambiguous number `{raw}`: YAML 1.1 tools read binary {value} but YAML 1.2 reads a string; write `{value}` for the number or `\"{raw}\"` for a string"
        ));
    }
    if unsigned.contains('_') && unsigned.chars().next().is_some_and(|c| c.is_ascii_digit()) {
        let plain = raw.replace('_', "");
        return Some(format!(
            "ambiguous number `{raw}`: YAML 1.1 tools read the number {plain} but YAML 1.2 reads a string; write `{plain}` for the number or `\"{raw}\"` for a string"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(src: &str) -> FileResult {
        parse_file("f.yaml", src.as_bytes())
    }

    fn errors(r: &FileResult) -> Vec<String> {
        r.diagnostics
            .iter()
            .filter(|d| d.is_error())
            .map(|d| format!("{}:{}: {}", d.line, d.column, d.message))
            .collect()
    }

    #[test]
    fn the_core_group_written_by_name_is_refused_and_its_secret_values_not_quoted() {
        let r = one(
            "apiVersion: core/v1\nkind: Secret\nmetadata:\n  name: s\nstringData: {password: hunter2}\n",
        );
        let e = errors(&r);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].contains("the core API group has no name; write `v1`"),
            "{e:?}"
        );
        assert!(!e[0].contains("hunter2"));
        assert!(r.objects.is_empty());
    }

    #[test]
    fn diagnostics_about_a_secrets_values_never_quote_them() {
        let secret =
            |body: &str| format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: s}}\n{body}");
        let configmap =
            |body: &str| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\n{body}");
        for (body, value) in [
            ("stringData: {pin: 0123456}\n", "123456"),
            ("stringData: {pin: 0o1234567}\n", "1234567"),
            (
                "data:\n  big: 123456789012345678901234567890\n",
                "12345678901234567890",
            ),
            ("stringData: {pin: 1e400}\n", "1e400"),
        ] {
            let e = errors(&parse_file("s.yaml", secret(body).as_bytes()));
            assert_eq!(e.len(), 1, "{body}: {e:?}");
            assert!(!e[0].contains(value), "{body}: {e:?}");
            assert!(e[0].contains("not shown"), "{body}: {e:?}");
            // Inside a List too.
            let list = format!(
                "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Secret\n  metadata: {{name: s}}\n  {}",
                body.replace('\n', "\n  ")
            );
            let e = errors(&parse_file("l.yaml", list.as_bytes()));
            assert!(e.len() == 1 && !e[0].contains(value), "{list}: {e:?}");
            // Elsewhere the value helps the author and is shown.
            let e = errors(&parse_file("c.yaml", configmap(body).as_bytes()));
            assert!(e.len() == 1 && e[0].contains(value), "{body}: {e:?}");
        }
        // A JSON Secret is recognised as well.
        let json = b"{\"apiVersion\": \"v1\", \"kind\": \"Secret\", \"metadata\": {\"name\": \"s\"},\n \"stringData\": {\"pin\": 1e400}}";
        let e = errors(&parse_file("s.json", json));
        assert!(e.len() == 1 && !e[0].contains("1e400"), "{e:?}");
    }

    #[test]
    fn only_yaml_yml_and_json_files_are_manifests() {
        assert!(is_manifest_path("a/b.yaml"));
        assert!(is_manifest_path("b.yml"));
        assert!(is_manifest_path("x/y.json"));
        assert!(!is_manifest_path("README.md"));
        assert!(!is_manifest_path("a.yaml.bak"));
        assert!(!is_manifest_path(".yaml"));
    }

    #[test]
    fn multi_document_files_give_one_object_per_document_with_lines() {
        let r = one(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n# just a comment\n---\n\n---\nnull\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n",
        );
        assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
        let names: Vec<_> = r
            .objects
            .iter()
            .map(|d| (d.object.name().to_string(), d.line))
            .collect();
        assert_eq!(names, vec![("a".into(), 1), ("b".into(), 11)]);
    }

    #[test]
    fn byte_order_mark_is_dropped_and_crlf_works() {
        let r = parse_file(
            "f.yaml",
            b"\xef\xbb\xbfapiVersion: v1\r\nkind: ConfigMap\r\nmetadata:\r\n  name: a\r\ndata:\r\n  k: v\r\n",
        );
        assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
        assert_eq!(r.objects[0].object.get("data"), Some(&json!({"k": "v"})));
        assert_eq!(r.objects[0].object.api_version(), "v1");
    }

    #[test]
    fn invalid_utf8_is_an_error_with_the_byte_offset() {
        let r = parse_file("f.yaml", b"apiVersion: v1\nkind: \xff\n");
        assert_eq!(
            errors(&r),
            vec!["2:7: invalid UTF-8 at byte offset 21; save the file as UTF-8"]
        );
        assert!(r.objects.is_empty());
    }

    #[test]
    fn duplicate_keys_are_errors_with_position() {
        let r = one(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels:\n    track: a\n    track: b\n",
        );
        assert_eq!(errors(&r), vec!["7:5: duplicate key `track`"]);
        assert!(r.objects.is_empty());
        // In a mapping larger than those searched in order (looked up by hash), the same.
        let data: String = (0..12).map(|i| format!("  k{i}: v\n")).collect();
        let r = one(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n{data}  k3: again\n"
        ));
        assert_eq!(errors(&r), vec!["18:3: duplicate key `k3`"]);
        assert!(r.objects.is_empty());
    }

    #[test]
    fn yes_no_on_off_stay_strings() {
        let r = one(
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: a}\nspec:\n  a: yes\n  b: no\n  c: on\n  d: off\n  e: true\n  f: \"yes\"\n",
        );
        // Each unquoted one warns that kubectl reads it otherwise; the quoted one does not.
        assert_eq!(r.diagnostics.len(), 4, "{:?}", r.diagnostics);
        assert!(r.diagnostics.iter().all(|d| !d.is_error()));
        assert_eq!(
            r.diagnostics[0].to_string(),
            "f.yaml:5:6: warning: `yes` stays the string \"yes\" (YAML 1.2), but kubectl and other YAML 1.1 readers read it as the boolean true; write `\"yes\"` to keep a string or `true` for a boolean"
        );
        assert_eq!(
            r.objects[0].object.get("spec"),
            Some(&json!({"a": "yes", "b": "no", "c": "on", "d": "off", "e": true, "f": "yes"}))
        );
        // In a Secret the value is not quoted back.
        let secret =
            one("apiVersion: v1\nkind: Secret\nmetadata: {name: a}\nstringData:\n  k: Yes\n");
        assert_eq!(secret.diagnostics.len(), 1, "{:?}", secret.diagnostics);
        assert!(
            !secret.diagnostics[0].message.contains("Yes"),
            "{}",
            secret.diagnostics[0]
        );
    }

    #[test]
    fn leading_zero_numbers_are_errors_that_say_how_to_write_them() {
        let r = one("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  mode: 0755\n");
        let e = errors(&r);
        assert_eq!(e.len(), 1);
        assert!(e[0].starts_with("5:9: ambiguous number `0755`"), "{e:?}");
        assert!(e[0].contains("`\"0755\"`") && e[0].contains("`493` for the octal value"));
        // Quoted, it is a string and fine; 0 itself and 0.5 are fine.
        let ok = one(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  mode: \"0755\"\n  z: 0\n  f: 0.5\n  h: 0x1F\n",
        );
        assert!(ok.diagnostics.is_empty(), "{:?}", ok.diagnostics);
        assert_eq!(
            ok.objects[0].object.get("spec"),
            Some(&json!({"mode": "0755", "z": 0, "f": 0.5, "h": 31}))
        );
        for bad in ["0o17", "0b101", "1_000", "-012"] {
            let r = one(&format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: a}}\nspec: {{x: {bad}}}\n"
            ));
            assert_eq!(errors(&r).len(), 1, "{bad}: {:?}", r.diagnostics);
        }
    }

    #[test]
    fn rendered_output_is_read_as_kubectl_reads_it() {
        let src = "apiVersion: v1\nkind: Secret\nmetadata: {name: a}\ntype: Opaque\nimmutable: yes\nx:\n  mode: 0644\n  o: 0o17\n  b: 0b101\n  u: 1_000\n  h: 0x1F\n  f: 0789\n  s: \"0644\"\n  q: '0644'\n  neg: -012\n  on: off\n  v: v1.2\n  t: 1.20\n";
        let r = parse_file_with("rendered.yaml", src.as_bytes(), Mode::Rendered);
        assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
        let o = &r.objects[0].object;
        assert_eq!(o.get("immutable"), Some(&json!(true)));
        assert_eq!(
            o.get("x"),
            Some(
                &json!({"mode": 420, "o": 15, "b": 5, "u": 1000, "h": 31, "f": 789.0, "s": "0644", "q": "0644", "neg": -10, "true": false, "v": "v1.2", "t": 1.2})
            )
        );
        // The same text from Git is refused where the readings differ.
        let git = parse_file("git.yaml", src.as_bytes());
        assert!(errors(&git).len() >= 5, "{:?}", git.diagnostics);
        // Strings the API types as strings are still checked: kubectl would refuse them too.
        let bad = parse_file_with(
            "r.yaml",
            b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, labels: {l: yes}}\ndata: {k: 0644}\n",
            Mode::Rendered,
        );
        let e = errors(&bad);
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(
            e[0].contains("value of label `l` must be a string, not a boolean"),
            "{e:?}"
        );
        assert!(e[1].contains("`data.k` must be a string"), "{e:?}");
    }

    #[test]
    fn yaml11_scalars_resolve_as_go_yaml_v2_does() {
        for (raw, want) in [
            ("0644", json!(420)),
            ("-0o10", json!(-8)),
            ("+7", json!(7)),
            ("1e3", json!(1000.0)),
            (".5", json!(0.5)),
            ("Off", json!(false)),
            ("Y", json!(true)),
            ("TRUE", json!(true)),
        ] {
            assert_eq!(yaml11_scalar(raw), Some(want), "{raw}");
        }
        // `n` is YAML 1.1's false, even as a key.
        assert_eq!(yaml11_scalar("n"), Some(json!(false)));
        assert_eq!(
            yaml11_scalar("1_"),
            Some(json!(1)),
            "underscores are dropped first"
        );
        for raw in ["0x", "1.2.3", "v1", "-", "08:00", "abc", ""] {
            assert_eq!(yaml11_scalar(raw), None, "{raw}");
        }
        assert_eq!(
            yaml11_scalar(".inf"),
            Some(Value::Null),
            "refused by the caller"
        );
    }

    #[test]
    fn ambiguous_number_explains_each_legacy_form() {
        let same = ambiguous_number("007").unwrap();
        assert!(
            same.ends_with(
                "write `\"007\"` for a string, `7` for the number (the same in both readings)"
            ),
            "{same}"
        );
        let negative = ambiguous_number("-010").unwrap();
        assert!(
            negative.contains("`-10` for the decimal value, `-8` for the octal value"),
            "{negative}"
        );
        assert!(ambiguous_number("0755").unwrap().contains("octal"));
        assert!(ambiguous_number("0o17").unwrap().contains("octal 15"));
        assert!(ambiguous_number("0b101").unwrap().contains("binary 5"));
        assert!(ambiguous_number("1_000").unwrap().contains("1000"));
        assert_eq!(ambiguous_number("0"), None);
        assert_eq!(ambiguous_number("10"), None);
        assert_eq!(ambiguous_number("0.5"), None);
        assert_eq!(ambiguous_number("-3"), None);
    }

    #[test]
    fn merge_keys_and_aliases_are_applied() {
        let r = one(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata:\n  base: &b {x: \"1\", y: \"2\"}\n  more:\n    <<: *b\n    y: \"3\"\n",
        );
        assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
        assert_eq!(
            r.objects[0].object.get("data").unwrap()["more"],
            json!({"x": "1", "y": "3"})
        );
    }

    #[test]
    fn alias_bombs_stop_at_the_budget() {
        let mut src = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let p = i - 1;
            src.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        let r = one(&src);
        assert_eq!(errors(&r).len(), 1, "{:?}", r.diagnostics);
    }

    #[test]
    fn documents_without_api_version_and_kind_are_skipped_with_a_warning() {
        let r = one("replicaCount: 2\nimage: nginx\n");
        assert_eq!(r.skipped, 1);
        assert_eq!(r.diagnostics.len(), 1);
        assert_eq!(r.diagnostics[0].severity, Severity::Warning);
        assert!(r.objects.is_empty());
    }

    #[test]
    fn an_object_larger_than_the_api_server_accepts_is_an_error() {
        let mut big =
            String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n");
        for i in 0..100_000 {
            big.push_str(&format!("  k{i}: value\n"));
        }
        big.push_str("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: small\n");
        let r = one(&big);
        let e = errors(&r);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with("1:1: ConfigMap default/big is ")
                || e[0].contains("ConfigMap") && e[0].contains("more than the 1572864 bytes"),
            "{e:?}"
        );
        assert_eq!(
            r.objects.len(),
            1,
            "the small one stays (the file is refused by its error)"
        );
    }

    #[test]
    fn string_typed_fields_of_built_in_kinds_refuse_numbers_and_booleans() {
        let cm = one(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  version: 1.20\n  ok: \"1.20\"\n  flag: true\n",
        );
        let e = errors(&cm);
        assert_eq!(e.len(), 2, "{e:?}");
        assert_eq!(
            e[0],
            "6:12: `data.version` must be a string (the Kubernetes API types it so), not a number: write it quoted, `\"1.20\"`"
        );
        assert!(
            e[1].starts_with("8:9: `data.flag` must be a string"),
            "{e:?}"
        );
        let dep = one(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  template:\n    spec:\n      containers:\n      - name: c\n        args: [--port, 8080]\n        env:\n        - {name: A, value: 0x1F}\n        - {name: B, value: \"1\"}\n",
        );
        let e = errors(&dep);
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(
            e[0].contains("`spec.template.spec.containers[0].args[1]` must be a string"),
            "{e:?}"
        );
        assert!(
            e[1].contains("`spec.template.spec.containers[0].env[0].value` must be a string"),
            "{e:?}"
        );
        // Every field of a pod spec, each container's: reported in the document's order.
        let job = one(
            "apiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: j\nspec:\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          nodeSelector: {zone: 1}\n          serviceAccountName: true\n          containers:\n          - {name: a, image: 1.0, args: [1]}\n          - {name: b, image: 2.0, workingDir: 3}\n          initContainers:\n          - {name: i, command: [x, 1e3], ports: [{name: 80}]}\n",
        );
        let fields: Vec<String> = errors(&job)
            .iter()
            .map(|e| e.split('`').nth(1).unwrap_or_default().to_string())
            .collect();
        let pod = "spec.jobTemplate.spec.template.spec";
        assert_eq!(
            fields,
            [
                "nodeSelector.zone",
                "serviceAccountName",
                "containers[0].image",
                "containers[0].args[0]",
                "containers[1].image",
                "containers[1].workingDir",
                "initContainers[0].command[1]",
                "initContainers[0].ports[0].name",
            ]
            .map(|f| format!("{pod}.{f}"))
        );
        // A value wrong both ways is reported once, with the more specific message.
        let both =
            one("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  mode: 0755\n");
        let e = errors(&both);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("6:9: ambiguous number `0755`"), "{e:?}");
        // A Secret's value is never quoted back.
        let s =
            one("apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  pin: 123456\n");
        let e = errors(&s);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].contains("quote the value") && !e[0].contains("123456"),
            "{e:?}"
        );
        let svc = one(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\nspec:\n  ports:\n  - {name: 8080, port: 8080}\n",
        );
        assert!(
            errors(&svc)[0].contains("`spec.ports[0].name` must be a string"),
            "{:?}",
            errors(&svc)
        );
        // Kustomize's extension-less file name is read (a plain read refuses it).
        assert!(is_manifest_path("overlay/Kustomization"));
        assert!(!is_manifest_path("overlay/Makefile"));
        // Other kinds and other fields are left alone.
        let cr =
            one("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\ndata:\n  n: 1\n");
        assert!(errors(&cr).is_empty());
    }

    #[test]
    fn a_kustomization_or_a_chart_read_as_a_plain_file_is_an_error() {
        let k = one(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [a.yaml]\n",
        );
        assert!(errors(&k)[0].contains("configures kustomize"), "{k:?}");
        for name in [
            "app/kustomization.yaml",
            "kustomization.yml",
            "x/Kustomization",
            "chart/Chart.yaml",
        ] {
            let r = parse_file(name, b"resources: [a.yaml]\n");
            let e = errors(&r);
            assert_eq!(e.len(), 1, "{name}: {e:?}");
            assert!(e[0].starts_with("1:1: a "), "{name}: {e:?}");
            assert!(e[0].contains("nothing applied"));
        }
        // Files that only look alike are parsed as usual.
        assert!(parse_file("charts.yaml", b"a: 1\n").diagnostics[0].severity == Severity::Warning);
    }

    #[test]
    fn a_files_errors_come_in_one_round_each_once() {
        // A bad name, an ambiguous number, and a number in a string-typed field: all three at
        // once, each once, and `0755` in a string field keeps its own message.
        let r = one(concat!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: Web\n",
            "spec:\n  replicas: 012\n  template:\n    spec:\n      containers:\n",
            "      - name: web\n        image: nginx\n        args: [1e3, 0755]\n",
        ));
        let e = errors(&r);
        assert_eq!(e.len(), 4, "{e:?}");
        assert!(
            e.iter()
                .any(|m| m.starts_with("4:9: invalid metadata.name `Web`")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|m| m.starts_with("6:13: ") && m.contains("012")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|m| m.starts_with("12:16: ") && m.contains("\"1e3\"")),
            "{e:?}"
        );
        assert!(
            e.iter().any(|m| m.starts_with("12:21: ")
                && m.contains("0755")
                && !m.contains("must be a string")),
            "{e:?}"
        );
    }

    #[test]
    fn kinds_of_built_in_groups_are_checked_against_what_kubernetes_serves() {
        let case = one("apiVersion: v1\nkind: Configmap\nmetadata: {name: a}\n");
        assert_eq!(
            errors(&case),
            vec![
                "2:7: kind `Configmap` does not exist in the core group: kinds are case-sensitive; write `ConfigMap`"
            ]
        );
        let typo = one("apiVersion: apps/v1\nkind: Deploymnet\nmetadata: {name: a}\n");
        assert!(errors(&typo).is_empty());
        assert!(
            typo.diagnostics[0]
                .message
                .ends_with("did you mean `Deployment`?"),
            "{:?}",
            typo.diagnostics
        );
        let group = one("apiVersion: apps/v1\nkind: Service\nmetadata: {name: a}\n");
        assert!(
            group.diagnostics[0]
                .message
                .ends_with("Service is served as apiVersion `v1`"),
            "{:?}",
            group.diagnostics
        );
        // Lists, and custom resources, pass.
        for ok in [
            "apiVersion: v1\nkind: ConfigMapList\nitems: []\n",
            "apiVersion: example.com/v1\nkind: Deploymnet\nmetadata: {name: a}\n",
        ] {
            assert!(
                one(ok).diagnostics.is_empty(),
                "{ok}: {:?}",
                one(ok).diagnostics
            );
        }
    }

    #[test]
    fn a_wrong_identity_does_not_hide_the_documents_other_problems() {
        let r = one(
            "apiVersion: v1\nkind: configmap\nmetadata:\n  name: a\n  labels: {on: \"x\", enabled: yes}\n  annotations: {a: 1}\ndata: {mode: 0755}\n",
        );
        let all: Vec<String> = r
            .diagnostics
            .iter()
            .map(|d| format!("{}:{} {}", d.line, d.column, d.message))
            .collect();
        // The kind, the annotation and the number: errors; the `on` key and `yes`: warnings; in
        // reading order.
        assert_eq!(errors(&r).len(), 3, "{all:?}");
        assert!(
            all[0].starts_with("2:7 kind `configmap` does not exist in the core group")
                && all[0].contains("write `ConfigMap`"),
            "{all:?}"
        );
        assert!(
            all.iter().any(|m| m.starts_with("5:12 key `on`")),
            "{all:?}"
        );
        assert!(
            all.iter().any(|m| m.starts_with("5:30 `yes` stays")),
            "{all:?}"
        );
        let lines: Vec<u64> = r.diagnostics.iter().map(|d| d.line).collect();
        assert!(lines.windows(2).all(|w| w[0] <= w[1]), "{all:?}");
    }

    #[test]
    fn half_an_identity_is_an_error_not_a_skip() {
        let r = one("kind: Deployment\nmetadata: {name: a}\n");
        assert_eq!(errors(&r).len(), 1);
        assert!(errors(&r)[0].contains("`apiVersion` is missing"));
    }

    #[test]
    fn unrendered_templates_are_errors() {
        let r = one("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Values.name }}\n");
        let e = errors(&r);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with("4:9: `metadata.name` must be a string, not a mapping"),
            "{e:?}"
        );
        let k = one("apiVersion: v1\nkind: 3\nmetadata: {name: a}\n");
        assert!(errors(&k)[0].contains("`kind` must be a string, not a number"));
    }

    #[test]
    fn names_follow_kubernetes_rules_and_are_never_changed() {
        let r = one("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: MyConfig\n");
        let e = errors(&r);
        assert_eq!(e.len(), 1);
        assert!(
            e[0].starts_with("4:9: invalid metadata.name `MyConfig`: must be lowercase"),
            "{e:?}"
        );
        let svc = one("apiVersion: v1\nkind: Service\nmetadata:\n  name: a.b\n");
        assert!(errors(&svc)[0].contains("RFC 1123 label"));
        let cm = one("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a.b\n");
        assert!(cm.diagnostics.is_empty());
        let rbac = one(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: system:aggregate-to-view\n",
        );
        assert!(rbac.diagnostics.is_empty(), "{:?}", rbac.diagnostics);
        let long = one(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: {}\n",
            "n".repeat(64)
        ));
        assert!(errors(&long)[0].contains("at most 63"));
    }

    #[test]
    fn label_and_annotation_values_must_be_strings() {
        let r = one(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels:\n    version: 1.20\n  annotations:\n    enabled: true\n",
        );
        let e = errors(&r);
        assert_eq!(e.len(), 2, "{e:?}");
        assert_eq!(
            e[0],
            "6:14: value of label `version` must be a string, not a number: write `version: \"1.20\"`"
        );
        assert!(
            e[1].starts_with("8:14: value of annotation `enabled` must be a string, not a boolean")
        );
        let bad = one(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels:\n    app: \"has space\"\n",
        );
        assert!(errors(&bad)[0].contains("invalid value of label `app`"));
    }

    #[test]
    fn generate_name_without_name_is_rejected() {
        let r = one("apiVersion: batch/v1\nkind: Job\nmetadata:\n  generateName: migrate-\n");
        let e = errors(&r);
        assert_eq!(e.len(), 1);
        assert!(e[0].contains("generateName"), "{e:?}");
    }

    #[test]
    fn syntax_errors_name_line_and_column() {
        let r = one("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: \"unterminated\n");
        let e = errors(&r);
        assert_eq!(e.len(), 1);
        assert!(e[0].starts_with("4:9: "), "{e:?}");
    }

    #[test]
    fn lists_are_expanded_into_their_items() {
        let r = one(
            "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: b}\n",
        );
        assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
        let names: Vec<_> = r
            .objects
            .iter()
            .map(|d| (d.object.name(), d.line))
            .collect();
        assert_eq!(names, vec![("a", 4), ("b", 7)]);
    }

    #[test]
    fn json_files_parse_with_positions_and_duplicate_checks() {
        let r = parse_file(
            "x.json",
            br#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}}"#,
        );
        assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
        let dup = parse_file(
            "x.json",
            b"{\"apiVersion\": \"v1\",\n \"kind\": \"ConfigMap\",\n \"kind\": \"Secret\"}",
        );
        assert_eq!(errors(&dup), vec!["3:2: duplicate key `kind`"]);
    }

    #[test]
    fn live_dumps_may_repeat_a_key_and_the_last_one_wins_with_a_warning() {
        let src = b"apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: s}\nspec:\n  updateStrategy: {type: RollingUpdate}\n  updateStrategy: {type: OnDelete}\n";
        let git = parse_file("s.yaml", src);
        assert_eq!(errors(&git), vec!["6:3: duplicate key `updateStrategy`"]);
        let live = parse_file_with("s.yaml", src, Mode::Live);
        assert!(errors(&live).is_empty(), "{:?}", live.diagnostics);
        assert_eq!(live.diagnostics[0].line, 6);
        assert!(
            live.diagnostics[0]
                .message
                .contains("the last value is used")
        );
        assert_eq!(
            live.objects[0].object.get("spec").unwrap()["updateStrategy"]["type"],
            "OnDelete"
        );
    }

    #[test]
    fn json_that_is_not_json_is_an_error_in_json_terms() {
        let r = parse_file(
            "c.json",
            b"{\n  // a comment\n  \"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"a\"}\n}\n",
        );
        let e = errors(&r);
        assert_eq!(e.len(), 1);
        assert!(e[0].starts_with("2:3: invalid JSON: "), "{e:?}");
        let trailing = parse_file("t.json", b"{\"apiVersion\": \"v1\",}");
        assert_eq!(
            errors(&trailing),
            vec!["1:21: invalid JSON: key must be a string"]
        );
    }

    #[test]
    fn keys_that_read_as_the_same_text_are_duplicates() {
        for data in [
            "  \"1\": a\n  1: b\n",
            "  null: a\n  ~: b\n",
            "  \"null\": a\n  null: b\n",
        ] {
            let r = one(&format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: a}}\ndata:\n{data}"
            ));
            let e = errors(&r);
            assert_eq!(e.len(), 1, "{data}: {e:?}");
            assert!(e[0].starts_with("6:3: duplicate key"), "{e:?}");
        }
    }

    #[test]
    fn integers_beyond_64_bits_are_errors_not_rounded_floats() {
        let r = one(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\nspec:\n  n: 12345678901234567890123\n  m: 18446744073709551615\n",
        );
        let e = errors(&r);
        assert_eq!(
            e,
            vec![
                "5:6: integer `12345678901234567890123` does not fit in 64 bits; quote it to keep it as text"
            ]
        );
    }

    #[test]
    fn custom_tags_are_errors() {
        let r = one("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata:\n  k: !Ref foo\n");
        let e = errors(&r);
        assert_eq!(e.len(), 1);
        assert!(e[0].starts_with("5:11: unsupported tag `!Ref`"), "{e:?}");
    }

    #[test]
    fn api_version_and_kind_have_the_shapes_kubernetes_requires() {
        for (api, kind, at) in [
            ("a/b/c", "ConfigMap", "1:13"),
            ("/v1", "ConfigMap", "1:13"),
            ("v1/", "ConfigMap", "1:13"),
            ("\"apps/v1 \"", "Deployment", "1:13"),
            ("APPS/v1", "Deployment", "1:13"),
            ("v1", "configmap", "2:7"),
            ("v1", "\" ConfigMap\"", "2:7"),
            ("v1", "Config Map", "2:7"),
            ("driftless.io/v1", "Inventory", "1:13"),
        ] {
            let r = one(&format!(
                "apiVersion: {api}\nkind: {kind}\nmetadata: {{name: a}}\n"
            ));
            let e = errors(&r);
            assert_eq!(e.len(), 1, "{api} {kind}: {e:?}");
            assert!(e[0].starts_with(at), "{api} {kind}: {e:?}");
        }
        assert!(
            errors(&one(
                "apiVersion: v1\nkind: configmap\nmetadata: {name: a}\n"
            ))[0]
                .contains("write `ConfigMap`")
        );
        for (api, kind) in [
            ("apps/v1", "Deploy-"),
            ("example.com/v1", "9lives"),
            ("example.com/v1", "my_kind"),
            ("example.com/v1", &"K".repeat(64)),
        ] {
            let e = errors(&one(&format!(
                "apiVersion: {api}\nkind: {kind}\nmetadata: {{name: a}}\n"
            )));
            assert!(
                e.len() == 1 && e[0].starts_with("2:7: invalid kind"),
                "{api} {kind}: {e:?}"
            );
        }
        // Any kind a CRD may declare (apiextensions: a DNS-1035 label once lowercased).
        for (api, kind) in [
            ("v1", "ConfigMap"),
            ("apps/v1", "Deployment"),
            ("autoscaling/v2beta2", "HorizontalPodAutoscaler"),
            ("cert-manager.io/v1", "ClusterIssuer"),
            ("acid.zalan.do/v1", "postgresql"),
            ("example.com/v1", "my-widget"),
            ("example.com/v1", &"k".repeat(63)),
        ] {
            let r = one(&format!(
                "apiVersion: {api}\nkind: {kind}\nmetadata: {{name: a}}\n"
            ));
            assert!(
                r.diagnostics.is_empty(),
                "{api} {kind}: {:?}",
                r.diagnostics
            );
        }
    }

    #[test]
    fn scalar_documents_are_errors_and_list_documents_are_skipped() {
        let r = one("apiVersion v1\nkind ConfigMap\n");
        let e = errors(&r);
        assert_eq!(e.len(), 1);
        assert!(
            e[0].contains("not a mapping (a missing `:` after a key?)"),
            "{e:?}"
        );
        let l = one("- hosts: all\n  tasks: []\n");
        assert_eq!(l.skipped, 1);
        assert!(errors(&l).is_empty());
    }

    #[test]
    fn the_same_key_twice_in_a_set_is_a_conflict_naming_both_files() {
        let a = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n";
        let b = b"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: default}\n";
        let set = parse_set(
            [("b.yaml", &b[..]), ("a.yaml", &a[..])],
            Vec::new(),
            &Options::default(),
        );
        assert!(set.has_errors());
        let d = set.first_error().unwrap();
        assert_eq!(d.path, "b.yaml");
        assert_eq!(d.line, 2);
        assert!(d.message.contains("a.yaml:1:1"), "{}", d.message);
        assert_eq!(set.objects.len(), 1);
    }

    /// Duplicates across several files: the first declaration read is kept; each later one is
    /// an error after its file's own diagnostics, in file and document order (not key order).
    #[test]
    fn duplicates_are_reported_in_file_and_document_order_and_the_first_is_kept() {
        let cm = |name: &str, v: &str| {
            format!(
                "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{v: {v}}}\n"
            )
        };
        let one = cm("z", "\"1\"") + &cm("a", "\"1\"");
        let two = cm("bad", "1") + &cm("z", "\"2\"") + &cm("a", "\"2\"");
        let three = cm("a", "\"3\"");
        let set = parse_set(
            [
                ("1.yaml", one.as_bytes()),
                ("2.yaml", two.as_bytes()),
                ("3.yaml", three.as_bytes()),
            ],
            Vec::new(),
            &Options::default(),
        );
        let seen: Vec<(&str, u64, bool)> = set
            .diagnostics
            .iter()
            .map(|d| {
                (
                    d.path.as_str(),
                    d.line,
                    d.message.contains("declared twice"),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("2.yaml", 5, false),
                ("2.yaml", 7, true),
                ("2.yaml", 12, true),
                ("3.yaml", 2, true)
            ],
            "{:#?}",
            set.diagnostics
        );
        assert!(
            set.diagnostics[1]
                .message
                .starts_with("ConfigMap default/z")
        );
        assert!(
            set.diagnostics[2].message.contains("at 1.yaml:7:1"),
            "{}",
            set.diagnostics[2].message
        );
        let data = |name: &str| {
            set.objects[&ObjectKey::new("", "ConfigMap", "default", name)]
                .object
                .get("data")
                .cloned()
        };
        assert_eq!(data("a"), Some(serde_json::json!({"v": "1"})));
        assert_eq!(data("z"), Some(serde_json::json!({"v": "1"})));
        assert_eq!(set.files, 3);
    }

    #[test]
    fn namespaced_objects_get_the_default_namespace_and_cluster_scoped_do_not() {
        let src = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: web}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: y, namespace: other}\n";
        let set = parse_set(
            [("a.yaml", &src[..])],
            Vec::new(),
            &Options {
                default_namespace: "team".into(),
            },
        );
        let keys: Vec<String> = set.objects.keys().map(|k| k.to_string()).collect();
        assert_eq!(
            keys,
            vec!["ConfigMap other/y", "ConfigMap team/x", "Namespace web"]
        );
    }

    #[test]
    fn non_scalar_keys_are_errors_and_scalar_keys_become_text() {
        let r = one(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata:\n  80: http\n  true: t\n",
        );
        assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
        assert_eq!(
            r.objects[0].object.get("data"),
            Some(&json!({"80": "http", "true": "t"}))
        );
        let bad =
            one("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata:\n  ? [a, b]\n  : x\n");
        assert_eq!(errors(&bad).len(), 1);
    }
}
