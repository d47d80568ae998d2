//! The render stage: an app's files at one revision become its desired set, with every
//! diagnostic. One place, used by the agent, the previews and every CLI command.
//!
//! ```text
//! source (Git tree → files the renderer wants) → render (files → desired set) → plan/sync
//! ```
//!
//! A [`Renderer`] decides which files of the app's path it needs ([`Renderer::wants`], which the
//! Git tree walker asks) and how they become objects. Today there is one, [`Renderer::Plain`]:
//! YAML and JSON manifests parsed by the rules of [`crate::manifest`]. Kustomize and Helm are
//! the next variants (README "Rendering"); each will take the files written out at the revision
//! and return a stream of objects that goes through the same manifest rules.
//!
//! [`Render`] keeps a parse cache keyed by (path, Git blob id): a new revision parses only the
//! files that changed. [`Render::render`] is pure; [`Render::read`] is the one edge, reading the
//! files the renderer wants from the Git cache first.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::AppConfig;
use crate::ignore::{self, IgnoreRule};
use crate::manifest::{self, DesiredSet, FileResult};
use crate::object::Revision;
use crate::source::{self, Files, GitCache};

/// How an app's files become objects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Renderer {
    /// Plain YAML and JSON manifests (`*.yaml`, `*.yml`, `*.json`, and Kustomize's file
    /// names, read only to refuse them until Kustomize rendering exists).
    #[default]
    Plain,
}

impl Renderer {
    /// The renderer an app's config asks for. Only [`Renderer::Plain`] exists yet.
    pub fn for_app(_cfg: &AppConfig) -> Self {
        Renderer::Plain
    }

    /// True when the renderer needs the file at `path` (relative to the repository root):
    /// the Git tree walker reads only these.
    pub fn wants(self, path: &str) -> bool {
        match self {
            Renderer::Plain => manifest::is_manifest_path(path),
        }
    }

    /// [`Renderer::wants`] as a plain function, for the tree walker.
    pub fn selector(self) -> fn(&str) -> bool {
        match self {
            Renderer::Plain => manifest::is_manifest_path,
        }
    }
}

/// One app's render stage: its renderer, the namespace for objects that declare none, and the
/// parse cache of the newest tree.
#[derive(Debug, Default)]
pub struct Render {
    renderer: Renderer,
    options: manifest::Options,
    /// Each file of the newest tree parsed, by (path, blob id).
    parsed: HashMap<(String, String), Arc<FileResult>>,
    /// Fields taken out of the declarations (`sync.ignore`).
    ignore: Vec<IgnoreRule>,
}

impl Render {
    /// A render stage with `renderer` that puts namespaced objects declaring no namespace in
    /// `default_namespace`.
    pub fn new(renderer: Renderer, default_namespace: &str) -> Self {
        Self {
            renderer,
            options: manifest::Options {
                default_namespace: default_namespace.to_string(),
            },
            parsed: HashMap::new(),
            ignore: Vec::new(),
        }
    }

    /// The render stage of an app: its renderer and its target namespace
    /// (`apps[].target.namespace`).
    pub fn for_app(cfg: &AppConfig) -> Self {
        let mut render = Self::new(Renderer::for_app(cfg), &cfg.target.namespace.value);
        render.ignore = cfg.sync.ignore_rules();
        render
    }

    /// Reads the files of `cfg`'s path at `revision` that the renderer wants from the Git
    /// cache (within `source.limits`), without rendering them: a caller that compares the
    /// tree id first (an unchanged path needs no rendering) renders them after.
    ///
    /// # Errors
    ///
    /// The read's error: [`source::Error::PathNotFound`] when the path is not a folder at that
    /// revision, or a cache failure.
    pub async fn files(
        &self,
        git: &GitCache,
        cfg: &AppConfig,
        revision: &Revision,
    ) -> Result<Files, source::Error> {
        git.read_selected(
            &cfg.source.repo.value,
            revision,
            &cfg.source.path.value,
            cfg.source.limits.limits(),
            self.renderer.selector(),
        )
        .await
    }

    /// [`Render::files`], then [`Render::render`].
    ///
    /// # Errors
    ///
    /// As [`Render::files`].
    pub async fn read(
        &mut self,
        git: &GitCache,
        cfg: &AppConfig,
        revision: &Revision,
    ) -> Result<DesiredSet, source::Error> {
        let files = self.files(git, cfg, revision).await?;
        Ok(self.render(files))
    }

    /// The desired set `files` declare, with every diagnostic (the walker's first). Files
    /// whose (path, blob id) were rendered before are not parsed again; the cache then keeps
    /// the files of this tree only. Files without a blob id (read from disk) are always parsed.
    pub fn render(&mut self, files: Files) -> DesiredSet {
        let mut set = match self.renderer {
            Renderer::Plain => self.plain(files),
        };
        // What another writer owns (`sync.ignore`) is not Git's: out of the declaration
        // before anything compares or applies it.
        if !self.ignore.is_empty() {
            for (key, declared) in &mut set.objects {
                ignore::strip(key, &mut declared.object, &self.ignore);
            }
        }
        set
    }

    fn plain(&mut self, mut files: Files) -> DesiredSet {
        // In path order, whatever the source (Git trees are; a folder walk may not be).
        files.files.sort_by(|a, b| a.0.cmp(&b.0));
        let key = |path: &str| {
            (
                path.to_string(),
                files.blob_ids.get(path).cloned().unwrap_or_default(),
            )
        };
        let cached = |k: &(String, String)| !k.1.is_empty() && self.parsed.contains_key(k);
        let misses: Vec<(&str, &[u8])> = files
            .files
            .iter()
            .filter(|(p, _)| !cached(&key(p)))
            .map(|(p, b)| (p.as_str(), b.as_slice()))
            .collect();
        let fresh = manifest::parse_many(&misses);
        let parsed = misses.len();
        let mut next: HashMap<(String, String), Arc<FileResult>> = HashMap::new();
        let mut results = Vec::with_capacity(files.files.len());
        let mut fresh = misses.iter().zip(fresh);
        for (path, _) in &files.files {
            let k = key(path);
            let r = if cached(&k) {
                self.parsed[&k].clone()
            } else {
                match fresh.next() {
                    Some((_, r)) => Arc::new(r),
                    None => continue,
                }
            };
            results.push((*r).clone());
            if !k.1.is_empty() {
                next.insert(k, r);
            }
        }
        tracing::debug!(
            parsed,
            reused = files.files.len() - parsed,
            "Manifests parsed (unchanged files reused by blob id)"
        );
        self.parsed = next;
        manifest::assemble(results, files.diagnostics, &self.options)
    }
}
