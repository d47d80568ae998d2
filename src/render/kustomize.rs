//! The walk of a Kustomize overlay's references, done on Git objects before `kustomize build`
//! runs: it says which folders and files the build can reach (what to write out, and what the
//! render's cache key covers) and refuses, with file, line and column, every reference that
//! would leave the repository or reach the network.
//!
//! kustomize's own load restrictor (`LoadRestrictionsRootOnly`) confines *files* to the
//! kustomization's folder, but a *directory* base (`resources: [../../../../etc/x]`) may point
//! anywhere on the machine, and a reference that is not found locally is tried as a remote
//! base (`git fetch`, HTTP). Here every reference must name a file or folder inside the
//! repository at the revision: an absolute path, a `..` past the root, a symlink out of the
//! repository, a URL and a missing path are errors, and the build is not run.
//!
//! Fields read (kustomize's `types.Kustomization`): `resources`, `bases`, `components`, `crds`,
//! `configurations`, `patches[].path`, `patchesStrategicMerge`, `patchesJson6902[].path`,
//! `replacements[].path`, `openapi.path`, `configMapGenerator`/`secretGenerator` `files`,
//! `envs` and `env`, `generators`, `transformers`, `validators`. `helmCharts`,
//! `helmChartInflationGenerator` and `helmGlobals` are refused: they need `--enable-helm`,
//! which pulls charts from the network while rendering. This module does no I/O: it reads
//! through [`Tree`].

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::manifest::Diagnostic;
pub use crate::source::normalize;
use crate::source::{Entry, KUSTOMIZATION_FILES};

/// What the walk reads: a repository at one revision (Git objects, or a folder on disk for
/// `driftless validate`).
pub trait Tree {
    /// What the repository path `path` is (normalized, `""` the root).
    fn entry(&self, path: &str) -> Entry;
    /// The bytes of the file at `path`, `None` when it cannot be read.
    fn read(&self, path: &str) -> Option<Vec<u8>>;
}

/// What one overlay's build can reach.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Walk {
    /// The kustomization file of the overlay's root folder (`apps/staging/kustomization.yaml`).
    pub file: String,
    /// Every folder (whole) and file the build may read, with its Git object id: the folders
    /// of each kustomization reached and each file referenced.
    pub reached: BTreeMap<String, String>,
    /// Refused references, one error each; the build must not run when there is one.
    pub diagnostics: Vec<Diagnostic>,
    /// True when a reference may name more files than the walk can see (a generator or
    /// transformer config file): the whole repository is written out and the cache key is the
    /// root tree.
    pub uncertain: bool,
}

impl Walk {
    /// True when a reference was refused.
    pub fn refused(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }
}

/// A reference as written, with where.
type Ref = Spanned<String>;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct KustomizationFile {
    #[serde(default)]
    resources: Vec<Ref>,
    #[serde(default)]
    bases: Vec<Ref>,
    #[serde(default)]
    components: Vec<Ref>,
    #[serde(default)]
    crds: Vec<Ref>,
    #[serde(default)]
    configurations: Vec<Ref>,
    #[serde(default)]
    patches: Vec<PathEntry>,
    #[serde(default)]
    patches_strategic_merge: Vec<Ref>,
    #[serde(default)]
    patches_json6902: Vec<PathEntry>,
    #[serde(default)]
    replacements: Vec<PathEntry>,
    #[serde(default)]
    openapi: Option<PathEntry>,
    #[serde(default)]
    config_map_generator: Vec<Generator>,
    #[serde(default)]
    secret_generator: Vec<Generator>,
    #[serde(default)]
    generators: Vec<Ref>,
    #[serde(default)]
    transformers: Vec<Ref>,
    #[serde(default)]
    validators: Vec<Ref>,
    #[serde(default)]
    helm_charts: Option<Spanned<serde::de::IgnoredAny>>,
    #[serde(default)]
    helm_chart_inflation_generator: Option<Spanned<serde::de::IgnoredAny>>,
    #[serde(default)]
    helm_globals: Option<Spanned<serde::de::IgnoredAny>>,
}

#[derive(Debug, Default, Deserialize)]
struct PathEntry {
    #[serde(default)]
    path: Option<Ref>,
}

#[derive(Debug, Default, Deserialize)]
struct Generator {
    #[serde(default)]
    files: Vec<Ref>,
    #[serde(default)]
    envs: Vec<Ref>,
    #[serde(default)]
    env: Option<Ref>,
}

/// The field names of a kustomization (at any depth) that name files or folders, or hold
/// entries that do: each must be spelled exactly so, since kustomize matches names ignoring
/// case.
const REFERENCE_FIELDS: &[&str] = &[
    "resources",
    "bases",
    "components",
    "crds",
    "configurations",
    "generators",
    "transformers",
    "validators",
    "patches",
    "patchesStrategicMerge",
    "patchesJson6902",
    "replacements",
    "openapi",
    "configMapGenerator",
    "secretGenerator",
    "helmCharts",
    "helmGlobals",
    "helmChartInflationGenerator",
    "path",
    "files",
    "envs",
    "env",
    "chartHome",
    "valuesFile",
    "additionalValuesFiles",
];

/// Fields whose values are maps of user data (`map[string]string` and the like in kustomize's
/// types): not struct fields, so their keys are not folded, and they name no file.
const MAP_FIELDS: &[&str] = &[
    "commonLabels",
    "commonAnnotations",
    "labels",
    "annotations",
    "pairs",
    "openapi",
    "options",
    "metadata",
];

/// A name as Go's `strings.EqualFold` compares it with an ASCII name: ASCII case ignored, and
/// the two non-ASCII letters that fold into ASCII (`ſ` U+017F to `s`, `K` U+212A to `k`)
/// folded.
fn go_fold(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            '\u{17f}' => 's',
            '\u{212a}' => 'k',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

/// Any YAML value, keeping where each mapping key is: only the keys matter.
#[derive(Debug)]
enum Any {
    Map(Vec<(Spanned<Scalar>, Any)>),
    Seq(Vec<Any>),
    Other,
}

/// A mapping key as text, whatever scalar it is.
#[derive(Debug)]
struct Scalar(String);

impl Any {
    /// Every key that folds to a [`REFERENCE_FIELDS`] name without being it: (key, the name,
    /// line, column).
    fn misspelled(&self, out: &mut Vec<(String, &'static str, u64, u64)>) {
        match self {
            Any::Map(entries) => {
                for (k, v) in entries {
                    let folded = go_fold(&k.value.0);
                    if let Some(canonical) = REFERENCE_FIELDS
                        .iter()
                        .find(|f| go_fold(f) == folded && **f != k.value.0)
                    {
                        out.push((
                            k.value.0.clone(),
                            canonical,
                            k.referenced.line().max(1),
                            k.referenced.column().max(1),
                        ));
                    }
                    // Maps of user data (labels, annotations, openapi, options): Go reads
                    // their keys exactly, and nothing in them names a file.
                    if !MAP_FIELDS.contains(&k.value.0.as_str()) {
                        v.misspelled(out);
                    }
                }
            }
            Any::Seq(items) => items.iter().for_each(|i| i.misspelled(out)),
            Any::Other => {}
        }
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a scalar key")
            }
            fn visit_str<E>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_unit<E>(self) -> Result<Scalar, E> {
                Ok(Scalar(String::new()))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Any {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Any;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any YAML value")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Any, A::Error> {
                let mut entries = Vec::new();
                while let Some(k) = a.next_key::<Spanned<Scalar>>()? {
                    entries.push((k, a.next_value::<Any>()?));
                }
                Ok(Any::Map(entries))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Any, A::Error> {
                let mut items = Vec::new();
                while let Some(i) = a.next_element::<Any>()? {
                    items.push(i);
                }
                Ok(Any::Seq(items))
            }
            fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Any, D::Error> {
                Any::deserialize(d)
            }
            fn visit_str<E>(self, _: &str) -> Result<Any, E> {
                Ok(Any::Other)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Any, E> {
                Ok(Any::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Any, E> {
                Ok(Any::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Any, E> {
                Ok(Any::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Any, E> {
                Ok(Any::Other)
            }
            fn visit_unit<E>(self) -> Result<Any, E> {
                Ok(Any::Other)
            }
            fn visit_none<E>(self) -> Result<Any, E> {
                Ok(Any::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// How a reference is used, which decides what a folder there means.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Use {
    /// `resources`, `bases`, `components`: a file of objects, or a folder with its own
    /// kustomization (walked in turn).
    Resource,
    /// A plugin config (`generators`, `transformers`, `validators`): a folder is a
    /// kustomization, a file may name more files.
    Plugin,
    /// Any other file reference.
    File,
}

/// Walks the overlay at `root` (a folder holding a kustomization file) and everything it
/// references.
pub fn walk(tree: &dyn Tree, root: &str) -> Walk {
    let mut w = Walker {
        tree,
        out: Walk::default(),
        visited: BTreeSet::new(),
    };
    w.out.file =
        kustomization_file(tree, root).unwrap_or_else(|| join(root, KUSTOMIZATION_FILES[0]));
    w.visit(root);
    w.out
}

/// The kustomization file of `dir`, in kustomize's order of names.
pub fn kustomization_file(tree: &dyn Tree, dir: &str) -> Option<String> {
    KUSTOMIZATION_FILES
        .iter()
        .map(|n| join(dir, n))
        .find(|p| matches!(tree.entry(p), Entry::File { .. }))
}

struct Walker<'t> {
    tree: &'t dyn Tree,
    out: Walk,
    visited: BTreeSet<String>,
}

impl Walker<'_> {
    fn error(&mut self, file: &str, at: &Ref, message: String) {
        self.out.diagnostics.push(Diagnostic::error(
            file,
            at.referenced.line().max(1),
            at.referenced.column().max(1),
            message,
        ));
    }

    /// A folder reached as a kustomization (the root, a base, a component).
    fn visit(&mut self, dir: &str) {
        if !self.visited.insert(dir.to_string()) {
            return;
        }
        if let Some(id) = self.tree.entry(dir).id() {
            self.out.reached.insert(dir.to_string(), id.to_string());
        }
        // A folder without a kustomization file: kustomize says so when it builds.
        let Some(file) = kustomization_file(self.tree, dir) else {
            return;
        };
        let Some(bytes) = self.tree.read(&file) else {
            self.out.diagnostics.push(Diagnostic::error(
                &file,
                1,
                1,
                "cannot read the kustomization file",
            ));
            return;
        };
        let Ok(text) = std::str::from_utf8(&bytes) else {
            self.out.diagnostics.push(Diagnostic::error(
                &file,
                1,
                1,
                "the kustomization is not valid UTF-8; nothing applied",
            ));
            return;
        };
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let options = serde_saphyr::options! { with_snippet: false };
        // kustomize reads field names as Go's encoding/json does, ignoring case (and folding
        // `ſ` to `s`, `K` to `k`): `Resources:` is `resources:` to it. A spelling the walk
        // would not read is refused, so that no reference reaches kustomize unchecked.
        if !text.trim().is_empty() {
            match serde_saphyr::from_str_with_options::<Any>(
                text,
                serde_saphyr::options! { with_snippet: false },
            ) {
                Ok(tree) => {
                    let mut found = Vec::new();
                    tree.misspelled(&mut found);
                    for (key, canonical, line, column) in found {
                        self.out.diagnostics.push(Diagnostic::error(
                            &file,
                            line,
                            column,
                            format!("`{key}` is read by kustomize as `{canonical}` (it ignores case in field names); write `{canonical}`; nothing applied"),
                        ));
                    }
                }
                Err(e) => {
                    let (line, column, message) = crate::yaml::error_parts(&e);
                    self.out.diagnostics.push(Diagnostic::error(
                        &file,
                        line,
                        column,
                        format!("cannot read the kustomization: {message}"),
                    ));
                    return;
                }
            }
        }
        let k: KustomizationFile = if text.trim().is_empty() {
            KustomizationFile::default()
        } else {
            match serde_saphyr::from_str_with_options(text, options) {
                Ok(k) => k,
                Err(e) => {
                    let (line, column, message) = crate::yaml::error_parts(&e);
                    self.out.diagnostics.push(Diagnostic::error(
                        &file,
                        line,
                        column,
                        format!("cannot read the kustomization: {message}"),
                    ));
                    return;
                }
            }
        };
        for (field, node) in [
            ("helmCharts", &k.helm_charts),
            (
                "helmChartInflationGenerator",
                &k.helm_chart_inflation_generator,
            ),
            ("helmGlobals", &k.helm_globals),
        ] {
            if let Some(n) = node {
                self.out.diagnostics.push(Diagnostic::error(
                    &file,
                    n.referenced.line().max(1),
                    n.referenced.column().max(1),
                    format!("`{field}` needs `kustomize build --enable-helm`, which pulls charts from the network while rendering; driftless renders offline: give the chart an app of its own with `source.helm` (a chart in the repository, or `chart:` from a chart repository)"),
                ));
            }
        }
        for r in k.resources.iter().chain(&k.bases).chain(&k.components) {
            self.reference(dir, &file, r, Use::Resource);
        }
        for r in k
            .generators
            .iter()
            .chain(&k.transformers)
            .chain(&k.validators)
        {
            // An inline config (`- |` with YAML in it) names no file of its own here.
            if r.value.contains('\n') {
                self.out.uncertain = true;
                continue;
            }
            self.reference(dir, &file, r, Use::Plugin);
        }
        for r in k.crds.iter().chain(&k.configurations) {
            self.reference(dir, &file, r, Use::File);
        }
        for r in &k.patches_strategic_merge {
            // kustomize reads an entry that is not a file as an inline patch.
            if !r.value.contains('\n') {
                self.reference(dir, &file, r, Use::File);
            }
        }
        let paths: Vec<&Ref> = k
            .patches
            .iter()
            .chain(&k.patches_json6902)
            .chain(&k.replacements)
            .chain(k.openapi.iter())
            .filter_map(|p| p.path.as_ref())
            .collect();
        for r in paths {
            self.reference(dir, &file, r, Use::File);
        }
        for g in k.config_map_generator.iter().chain(&k.secret_generator) {
            for r in &g.files {
                // `key=path` or `path`.
                let path = r.value.split_once('=').map_or(r.value.as_str(), |(_, p)| p);
                let r = Spanned {
                    value: path.to_string(),
                    referenced: r.referenced,
                    defined: r.defined,
                };
                self.reference(dir, &file, &r, Use::File);
            }
            for r in g.envs.iter().chain(g.env.iter()) {
                self.reference(dir, &file, r, Use::File);
            }
        }
    }

    /// One reference `r` written in `file` (in folder `dir`).
    fn reference(&mut self, dir: &str, file: &str, r: &Ref, usage: Use) {
        let raw = r.value.trim();
        if raw.is_empty() {
            return;
        }
        let remote = |w: &mut Self| {
            w.error(
                file,
                r,
                format!("remote base `{raw}`: driftless renders offline and never fetches while rendering; vendor it into this repository or give it an app of its own; nothing fetched, nothing applied"),
            );
        };
        if raw.contains("://") || raw.starts_with("git@") {
            return remote(self);
        }
        if raw.starts_with('/') || raw.starts_with('\\') || raw.starts_with('~') {
            self.error(
                file,
                r,
                format!("`{raw}` is an absolute path: a reference must be relative and stay inside the repository; nothing applied"),
            );
            return;
        }
        let Some(path) = normalize(&join(dir, raw)) else {
            self.error(
                file,
                r,
                format!("`{raw}` leads outside the repository; a reference must stay inside it; nothing applied"),
            );
            return;
        };
        match self.tree.entry(&path) {
            Entry::Folder { id } => match usage {
                Use::Resource | Use::Plugin => self.visit(&path),
                Use::File => {
                    self.out.reached.insert(path, id);
                }
            },
            Entry::File { id } => {
                if usage == Use::Plugin {
                    self.out.uncertain = true;
                }
                self.out.reached.insert(path, id);
            }
            // kustomize tries a reference it cannot find locally as a remote base.
            Entry::Missing if looks_remote(raw) => remote(self),
            Entry::Missing => self.error(
                file,
                r,
                format!("`{raw}` does not exist in the repository at this revision (kustomize would try it as a remote base; driftless does not); nothing applied"),
            ),
            Entry::Outside { target } => self.error(
                file,
                r,
                format!("`{raw}` leads outside the repository through the symlink target `{target}`; nothing applied"),
            ),
            Entry::Loop => self.error(
                file,
                r,
                format!("`{raw}`: too many levels of symbolic links; nothing applied"),
            ),
        }
    }
}

/// True for a missing reference kustomize would try to fetch: a `?ref=`-style query, a
/// `repo//path` split, or a first segment that is a host name (`github.com/org/repo`).
fn looks_remote(r: &str) -> bool {
    if r.contains("?ref=") || r.contains("?version=") || r.contains("//") {
        return true;
    }
    let first = r.split('/').next().unwrap_or(r);
    r.contains('/')
        && !first.starts_with('.')
        && first.contains('.')
        && first
            .rsplit('.')
            .next()
            .is_some_and(|tld| tld.len() >= 2 && tld.chars().all(|c| c.is_ascii_alphabetic()))
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A repository in memory: files by path; folders are the prefixes.
    struct Mem(HashMap<String, String>);

    impl Tree for Mem {
        fn entry(&self, path: &str) -> Entry {
            if path.starts_with("link-out") {
                return Entry::Outside {
                    target: "../../etc".into(),
                };
            }
            if self.0.contains_key(path) {
                return Entry::File {
                    id: format!("blob:{path}:{}", self.0[path].len()),
                };
            }
            let prefix = format!("{path}/");
            if path.is_empty() || self.0.keys().any(|k| k.starts_with(&prefix)) {
                let mut inside: Vec<String> = self
                    .0
                    .iter()
                    .filter(|(k, _)| path.is_empty() || k.starts_with(&prefix))
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                inside.sort();
                return Entry::Folder {
                    id: format!("tree:{}", inside.join(";").len()),
                };
            }
            Entry::Missing
        }
        fn read(&self, path: &str) -> Option<Vec<u8>> {
            self.0.get(path).map(|s| s.as_bytes().to_vec())
        }
    }

    fn repo(files: &[(&str, &str)]) -> Mem {
        Mem(files
            .iter()
            .map(|(p, c)| (p.to_string(), c.to_string()))
            .collect())
    }

    #[test]
    fn an_overlay_reaches_its_base_and_its_patch_files() {
        let t = repo(&[
            (
                "apps/base/kustomization.yaml",
                "resources: [deploy.yaml]\nconfigMapGenerator:\n- name: c\n  files: [app.conf, key=other.conf]\n  envs: [vars.env]\n",
            ),
            ("apps/base/deploy.yaml", "kind: x"),
            ("apps/base/app.conf", "a"),
            ("apps/base/other.conf", "b"),
            ("apps/base/vars.env", "A=1"),
            (
                "apps/staging/kustomization.yaml",
                "resources:\n- ../base\npatches:\n- path: patch.yaml\n  target: {kind: Deployment}\n- patch: |\n    - op: add\n",
            ),
            ("apps/staging/patch.yaml", "kind: y"),
            ("elsewhere/x.yaml", "kind: z"),
        ]);
        let w = walk(&t, "apps/staging");
        assert!(w.diagnostics.is_empty(), "{:?}", w.diagnostics);
        assert_eq!(w.file, "apps/staging/kustomization.yaml");
        let reached: Vec<&str> = w.reached.keys().map(String::as_str).collect();
        assert_eq!(
            reached,
            vec![
                "apps/base",
                "apps/base/app.conf",
                "apps/base/deploy.yaml",
                "apps/base/other.conf",
                "apps/base/vars.env",
                "apps/staging",
                "apps/staging/patch.yaml"
            ]
        );
        assert!(!w.uncertain);
    }

    #[test]
    fn escapes_remote_bases_and_missing_paths_are_refused_at_their_line() {
        let t = repo(&[(
            "app/kustomization.yaml",
            "resources:\n- ../../etc\n- /etc/passwd\n- https://github.com/org/repo//base?ref=v1\n- github.com/org/repo/base\n- git@github.com:org/repo.git\n- missing\n- ../link-out\n",
        )]);
        let w = walk(&t, "app");
        let got: Vec<String> = w.diagnostics.iter().map(|d| d.to_string()).collect();
        assert_eq!(got.len(), 7, "{got:#?}");
        assert!(
            got[0].starts_with(
                "app/kustomization.yaml:2:3: error: `../../etc` leads outside the repository"
            ),
            "{got:#?}"
        );
        assert!(got[1].contains(":3:3: error: `/etc/passwd` is an absolute path"));
        assert!(
            got[2].contains(":4:3: error: remote base `https://github.com/org/repo//base?ref=v1`")
        );
        assert!(got[3].contains(":5:3: error: remote base `github.com/org/repo/base`"));
        assert!(got[4].contains(":6:3: error: remote base `git@github.com"));
        assert!(got[5].contains(":7:3: error: `missing` does not exist"));
        assert!(got[6].contains(
            ":8:3: error: `../link-out` leads outside the repository through the symlink"
        ));
        assert!(w.refused());
    }

    #[test]
    fn a_field_spelled_another_way_that_kustomize_would_read_is_refused() {
        // Go's encoding/json matches `Resources`, `RESOURCES` and `reſources` (U+017F) to
        // `resources`: the walk, reading only `resources`, would never check them.
        let t = repo(&[
            (
                "app/kustomization.yaml",
                "resources: [cm.yaml]\nre\u{17f}ources: [../../../etc]\nPatches:\n- PATH: /etc/passwd\nconfigMapGenerator:\n- name: c\n  Files: [/etc/shadow]\n  \u{212a}ind: x\n",
            ),
            ("app/cm.yaml", "kind: x"),
        ]);
        let w = walk(&t, "app");
        let got: Vec<String> = w.diagnostics.iter().map(|d| d.to_string()).collect();
        assert_eq!(got.len(), 4, "{got:#?}");
        assert!(got[0].starts_with("app/kustomization.yaml:2:1: error: `re\u{17f}ources` is read by kustomize as `resources`"), "{got:#?}");
        assert!(got[1].contains(":3:1: error: `Patches` is read by kustomize as `patches`"));
        assert!(got[2].contains(":4:3: error: `PATH` is read by kustomize as `path`"));
        assert!(got[3].contains(":7:3: error: `Files` is read by kustomize as `files`"));
        assert!(w.refused());
        // Other fields in any case (kustomize's own business) and values are left alone.
        let t = repo(&[(
            "k/kustomization.yaml",
            "commonLabels: {Path: x, files: y}\nnamePrefix: Resources-\n",
        )]);
        let w = walk(&t, "k");
        assert!(w.diagnostics.is_empty(), "{:?}", w.diagnostics);
        let t = repo(&[("u/kustomization.yaml", "")]);
        assert!(walk(&t, "u").diagnostics.is_empty());
    }

    #[test]
    fn helm_charts_in_a_kustomization_are_refused() {
        let t = repo(&[(
            "app/kustomization.yaml",
            "helmCharts:\n- name: x\n  repo: https://charts.example.com\n",
        )]);
        let w = walk(&t, "app");
        assert_eq!(w.diagnostics.len(), 1);
        assert!(
            w.diagnostics[0].message.contains("--enable-helm"),
            "{:?}",
            w.diagnostics
        );
        assert_eq!(w.diagnostics[0].line, 2, "the value under `helmCharts:`");
    }

    #[test]
    fn a_plugin_config_file_makes_the_walk_uncertain_and_cycles_end() {
        let t = repo(&[
            (
                "a/kustomization.yaml",
                "resources: [../b]\ntransformers: [t.yaml]\n",
            ),
            ("a/t.yaml", "kind: PatchTransformer"),
            ("b/kustomization.yaml", "resources: [../a]\n"),
        ]);
        let w = walk(&t, "a");
        assert!(w.uncertain);
        assert!(w.reached.contains_key("b") && w.reached.contains_key("a/t.yaml"));
    }

    #[test]
    fn a_kustomization_that_is_not_yaml_is_an_error_at_its_line() {
        let t = repo(&[("k/kustomization.yaml", "resources: a.yaml\n")]);
        let w = walk(&t, "k");
        assert_eq!(w.diagnostics.len(), 1, "{:?}", w.diagnostics);
        assert!(
            w.diagnostics[0]
                .message
                .starts_with("cannot read the kustomization")
        );
    }
}
