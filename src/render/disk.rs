//! Rendering folders on disk, for `driftless validate`: an overlay's references walked with the
//! same rules as in Git (inside the enclosing repository's work tree), then `kustomize build`
//! or `helm template` run on the folder itself, with the same environment, limits and reading
//! of the output as the agent's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Error, Tree, helm, kustomize, locate, parse_output, run_checked};
use crate::manifest::{Diagnostic, FileResult};
use crate::source::{Entry, HelmConfig, RenderTools};

/// What a folder found on disk is rendered as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FolderKind {
    /// It holds a kustomization file.
    Kustomize,
    /// It holds a `Chart.yaml`.
    Chart,
}

/// A folder `driftless validate` renders instead of reading file by file.
#[derive(Clone, Debug)]
pub struct Folder {
    /// The folder as shown in diagnostics (as named on the command line).
    pub shown: String,
    /// The folder on disk.
    pub dir: PathBuf,
    /// What it holds.
    pub kind: FolderKind,
}

/// A folder on disk as the walk reads it: paths relative to `root` (the repository's work
/// tree), symlinks followed only while they stay inside it.
struct DiskTree {
    root: PathBuf,
}

impl Tree for DiskTree {
    fn entry(&self, path: &str) -> Entry {
        let full = self.root.join(path);
        if std::fs::symlink_metadata(&full).is_err() {
            return Entry::Missing;
        }
        match std::fs::canonicalize(&full) {
            Ok(real) if !real.starts_with(&self.root) => Entry::Outside {
                target: std::fs::read_link(&full)
                    .map(|t| t.display().to_string())
                    .unwrap_or_else(|_| real.display().to_string()),
            },
            Ok(real) if real.is_dir() => Entry::Folder { id: "disk".into() },
            Ok(real) if real.is_file() => Entry::File { id: "disk".into() },
            Ok(_) => Entry::Missing,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Entry::Loop,
            Err(_) => Entry::Missing,
        }
    }

    fn read(&self, path: &str) -> Option<Vec<u8>> {
        std::fs::read(self.root.join(path)).ok()
    }
}

/// The repository path `to` as seen from the folder `from` (`a/b`, `a/c/x` → `../c/x`).
fn relative(from: &str, to: &str) -> String {
    let from: Vec<&str> = from.split('/').filter(|s| !s.is_empty()).collect();
    let to: Vec<&str> = to.split('/').filter(|s| !s.is_empty()).collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    std::iter::repeat_n("..", from.len() - common)
        .chain(to[common..].iter().copied())
        .collect::<Vec<_>>()
        .join("/")
}

/// What stands for the repository around `dir`: the Git work tree it is in (the nearest folder
/// above it, itself included, that holds `.git`), else the current directory when `dir` is in
/// it, else `dir` itself.
fn work_tree(dir: &Path) -> PathBuf {
    if let Some(git) = dir.ancestors().find(|a| a.join(".git").exists()) {
        return git.to_path_buf();
    }
    match std::env::current_dir().and_then(std::fs::canonicalize) {
        Ok(cwd) if dir.starts_with(&cwd) => cwd,
        _ => dir.to_path_buf(),
    }
}

/// Renders each folder (an overlay with kustomize, a chart with helm and the default settings:
/// release name the folder's name, namespace `default`) and returns the parsed outputs and
/// the refusals of the walks. A renderer's failure is an error diagnostic on the folder.
pub async fn render_folders(
    folders: &[Folder],
    tools: &RenderTools,
    timeout: Duration,
    max_bytes: u64,
) -> (Vec<FileResult>, Vec<Diagnostic>) {
    let mut results = Vec::new();
    let mut diagnostics = Vec::new();
    for f in folders {
        let failed = |e: Error| Diagnostic::error(&f.shown, 1, 1, crate::render::chain(&e));
        let Ok(dir) = std::fs::canonicalize(&f.dir) else {
            diagnostics.push(Diagnostic::error(&f.shown, 1, 1, "cannot read folder"));
            continue;
        };
        let private = match tempfile::Builder::new()
            .prefix("driftless-validate-")
            .tempdir()
        {
            Ok(p) => p,
            Err(e) => {
                diagnostics.push(failed(Error::WriteFailed {
                    path: std::env::temp_dir(),
                    source: e,
                }));
                continue;
            }
        };
        let settings = super::Settings {
            timeout,
            limits: crate::source::Limits {
                max_bytes,
                ..Default::default()
            },
            tools: tools.clone(),
            ..Default::default()
        };
        match f.kind {
            FolderKind::Kustomize => {
                let root = work_tree(&dir);
                let rel = dir
                    .strip_prefix(&root)
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let walk = kustomize::walk(&DiskTree { root: root.clone() }, &rel);
                // Shown from the folder as named: `<shown>/../base/kustomization.yaml`.
                let shown = f.shown.trim_end_matches('/');
                let show = |p: &str| format!("{shown}/{}", relative(&rel, p));
                let refused = walk.refused();
                for mut d in walk.diagnostics {
                    d.path = show(&d.path);
                    diagnostics.push(d);
                }
                if refused {
                    continue;
                }
                let program = match locate(tools.kustomize.as_deref(), "kustomize") {
                    Ok(p) => p,
                    Err(e) => {
                        diagnostics.push(failed(e));
                        continue;
                    }
                };
                // The files the build reads that may hold Secret values: each file referenced
                // and the kustomization of each folder reached.
                let tree = DiskTree { root: root.clone() };
                let mut read = crate::source::Files::default();
                for path in walk.reached.keys() {
                    let file = match tree.entry(path) {
                        Entry::File { .. } => Some(path.clone()),
                        _ => kustomize::kustomization_file(&tree, path),
                    };
                    if let Some(file) = file
                        && let Some(bytes) = tree.read(&file)
                    {
                        read.files.push((file, bytes));
                    }
                }
                let hidden = super::redact::sensitive(&read, None, &[]);
                let command = format!("kustomize build {}", f.shown);
                let args = ["build".into(), dir.clone().into_os_string()];
                match run_checked(
                    &program,
                    &args,
                    private.path(),
                    &settings,
                    &command,
                    &hidden,
                )
                .await
                {
                    Ok(out) => results.push(parse_output(
                        &super::kustomize_output_path(f.shown.trim_end_matches('/')),
                        &out,
                        None,
                    )),
                    Err(e) => diagnostics.push(failed(e)),
                }
            }
            FolderKind::Chart => {
                let program = match locate(tools.helm.as_deref(), "helm") {
                    Ok(p) => p,
                    Err(e) => {
                        diagnostics.push(failed(e));
                        continue;
                    }
                };
                let release = dir
                    .file_name()
                    .map(|n| n.to_string_lossy().to_lowercase())
                    .unwrap_or_else(|| "release".into());
                let defaults = HelmConfig::default();
                let invocation = helm::Invocation {
                    release: &release,
                    namespace: "default",
                    chart: dir.clone().into_os_string(),
                    values: Vec::new(),
                    settings: &defaults,
                };
                let command = format!("helm template {release} {}", f.shown);
                match run_checked(
                    &program,
                    &invocation.args(),
                    private.path(),
                    &settings,
                    &command,
                    &[],
                )
                .await
                {
                    Ok(out) => {
                        let text = String::from_utf8_lossy(&out);
                        for seg in helm::split(&text, f.shown.trim_end_matches('/')) {
                            results.push(parse_output(
                                &seg.path,
                                seg.text.as_bytes(),
                                Some(&command),
                            ));
                        }
                    }
                    Err(e) => diagnostics.push(failed(e)),
                }
            }
        }
    }
    (results, diagnostics)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_shown_from_the_folder_named() {
        assert_eq!(
            relative("apps/staging", "apps/staging/kustomization.yaml"),
            "kustomization.yaml"
        );
        assert_eq!(
            relative("apps/staging", "apps/base/kustomization.yaml"),
            "../base/kustomization.yaml"
        );
        assert_eq!(relative("", "a/b"), "a/b");
    }
}
