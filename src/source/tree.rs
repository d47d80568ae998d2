//! Read access to one commit's tree for the render stage: what a repository path is (symlinks
//! followed by the rules of ARCHITECTURE.md section 5), a file's bytes, and every file under a
//! set of paths (to write a private copy for `kustomize build` or `helm template`). All of it
//! runs inside one blocking task ([`GitCache::with_tree`]); nothing is checked out.

use git2::{Oid, Repository};

use super::{Error, Files, GitCache, Limits, Resolved, Result, Walker, normalize, open_cache};
use crate::object::Revision;

/// What a repository path is at one revision, after following symlinks that stay inside the
/// repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A folder; `id` is its tree id (equal ids, equal contents).
    Folder {
        /// The Git tree id.
        id: String,
    },
    /// A file; `id` is its blob id.
    File {
        /// The Git blob id.
        id: String,
    },
    /// Nothing is there (or a submodule, which is never read).
    Missing,
    /// The path climbs out of the repository (`..` past the root, an absolute path), or goes
    /// through a symlink that does; `target` is what was followed.
    Outside {
        /// The path or link target that leaves.
        target: String,
    },
    /// Too many symlinks in a row (a loop).
    Loop,
}

impl Entry {
    /// The Git object id of a folder or a file.
    pub fn id(&self) -> Option<&str> {
        match self {
            Entry::Folder { id } | Entry::File { id } => Some(id),
            _ => None,
        }
    }
}

/// One commit's tree, read inside a blocking task. Paths are repository paths (`a/b`, `""` for
/// the root), normalized: `.` and `..` segments are resolved, and one climbing past the root is
/// [`Entry::Outside`].
pub struct TreeReader<'r> {
    repo: &'r Repository,
    root: git2::Tree<'r>,
    revision: Revision,
}

impl<'r> TreeReader<'r> {
    fn walker(&self, limits: Limits, stop_at_rendered: bool) -> Walker<'r> {
        Walker::new(
            self.repo,
            self.root.clone(),
            limits,
            |_| true,
            stop_at_rendered,
        )
    }

    /// The commit this tree belongs to.
    pub fn revision(&self) -> &Revision {
        &self.revision
    }

    /// The id of the commit's root tree.
    pub fn root_id(&self) -> String {
        self.root.id().to_string()
    }

    /// What `path` is.
    pub fn entry(&self, path: &str) -> Entry {
        let Some(path) = normalize(path) else {
            return Entry::Outside {
                target: path.to_string(),
            };
        };
        if path.is_empty() {
            return Entry::Folder {
                id: self.root.id().to_string(),
            };
        }
        match self.walker(Limits::default(), false).resolve(&path, 0) {
            Some(Resolved::Tree(t)) => Entry::Folder {
                id: t.id().to_string(),
            },
            Some(Resolved::Blob(oid)) => Entry::File {
                id: oid.to_string(),
            },
            Some(Resolved::Outside(target)) => Entry::Outside { target },
            Some(Resolved::TooDeep) => Entry::Loop,
            Some(Resolved::Missing) | None => Entry::Missing,
        }
    }

    /// The bytes of the file at `path`; `None` when it is not a file.
    ///
    /// # Errors
    ///
    /// [`Error::ReadFailed`] when the object database fails to give the blob.
    pub fn read(&self, path: &str) -> Result<Option<Vec<u8>>> {
        let Entry::File { id } = self.entry(path) else {
            return Ok(None);
        };
        let blob = Oid::from_str(&id)
            .and_then(|oid| self.repo.find_blob(oid))
            .map_err(|source| Error::ReadFailed {
                what: format!("file {path}"),
                source,
            })?;
        Ok(Some(blob.content().to_vec()))
    }

    /// Every file under each of `paths` (a folder, read recursively, or a file), whatever its
    /// name, with the walk's rules: a symlink followed only inside the repository (its target's
    /// contents appear at the link's path), an error diagnostic for any other link and for a
    /// submodule, and `limits` counted over all the paths together (past one, the walk stops
    /// with an error and the files are dropped). A path nested in another is read once.
    ///
    /// # Errors
    ///
    /// [`Error::ReadFailed`] when the object database fails to give an object.
    pub fn read_all(&self, paths: &[String], limits: Limits) -> Result<Files> {
        let mut sorted: Vec<String> = paths.iter().filter_map(|p| normalize(p)).collect();
        sorted.sort();
        sorted.dedup();
        let mut walker = self.walker(limits, false);
        let mut done: Vec<String> = Vec::new();
        for path in sorted {
            let inside =
                |d: &String| d.is_empty() || path == *d || path.starts_with(&format!("{d}/"));
            if done.iter().any(inside) {
                continue;
            }
            match self.entry(&path) {
                Entry::Folder { id } => {
                    let tree = Oid::from_str(&id)
                        .and_then(|oid| self.repo.find_tree(oid))
                        .map_err(|source| Error::ReadFailed {
                            what: format!("folder {path}"),
                            source,
                        })?;
                    walker.walk(&tree, &path, 0)?;
                }
                Entry::File { id } => {
                    let oid = Oid::from_str(&id).map_err(|source| Error::ReadFailed {
                        what: format!("file {path}"),
                        source,
                    })?;
                    walker.read_blob(&path, oid)?;
                }
                _ => {}
            }
            done.push(path);
        }
        if walker.stopped {
            walker.out.files.clear();
            walker.out.blob_ids.clear();
        }
        walker.out.files.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(walker.out)
    }
}

impl GitCache {
    /// Runs `f` on the tree of `revision` (fetched from `url`) in a blocking task, and returns
    /// what it returns.
    ///
    /// # Errors
    ///
    /// [`Error::CacheFailed`] when the cache cannot be opened, [`Error::ReadFailed`] when the
    /// commit is not in it, [`Error::TaskFailed`].
    pub async fn with_tree<T, F>(&self, url: &str, revision: &Revision, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&TreeReader<'_>) -> T + Send + 'static,
    {
        let repo_path = self.repo_path(url);
        let revision = revision.clone();
        let span = tracing::debug_span!("git_tree", revision = %revision.short());
        tokio::task::spawn_blocking(move || {
            let _span = span.entered();
            let repo = open_cache(&repo_path)?;
            let read_failed = |source| Error::ReadFailed {
                what: format!("commit {revision}"),
                source,
            };
            let oid = Oid::from_str(&revision.0).map_err(read_failed)?;
            let commit = repo.find_commit(oid).map_err(read_failed)?;
            let root = commit.tree().map_err(read_failed)?;
            let reader = TreeReader {
                repo: &repo,
                root,
                revision: revision.clone(),
            };
            Ok(f(&reader))
        })
        .await
        .map_err(Error::TaskFailed)?
    }

    /// The folder the cache lives in (`cacheDir`): the render stage writes its private copies
    /// under `<dir>/render`, the chart cache lives in `<dir>/charts`.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }
}
