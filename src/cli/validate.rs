//! `driftless validate`: files and folders parsed the way the agent parses an app's path, with
//! folders that hold a kustomization file or a chart rendered by the real `kustomize` and
//! `helm`.

use super::*;
use crate::render::{Folder, FolderKind};

/// `driftless validate`: parse files and folders, print diagnostics, exit 1 on errors. A
/// folder holding a kustomization file is built with `kustomize build` (its references walked
/// first, inside the Git work tree it is in); one holding a `Chart.yaml` is rendered with
/// `helm template` and the default settings; the renderers are found as the config's
/// `renderers:` says, else on the PATH.
pub(super) async fn validate(cfg: &Loaded, paths: &[PathBuf]) -> u8 {
    // Each PATH is its own desired set, as each app's folder is: an object declared in two
    // of them is not a duplicate.
    let tools = cfg.config.renderers.clone();
    let (mut files_n, mut objects, mut skipped, mut errors, mut warnings) = (0, 0, 0, 0, 0);
    for p in paths {
        let mut files: Vec<(String, Vec<u8>)> = Vec::new();
        let mut prior = Vec::new();
        let mut folders = Vec::new();
        collect_files(p, &mut files, &mut prior, &mut folders);
        let mut render = crate::render::Render::default();
        let plain = render.render_files(source::Files {
            files,
            diagnostics: prior,
            ..Default::default()
        });
        let (rendered, found) = crate::render::render_folders(
            &folders,
            &tools,
            std::time::Duration::from_secs(60),
            source::Limits::default().max_bytes,
        )
        .await;
        let mut diagnostics = plain.diagnostics.clone();
        diagnostics.extend(found);
        let set = manifest::assemble(
            std::iter::once(manifest::FileResult {
                objects: plain.objects.into_values().collect(),
                diagnostics: Vec::new(),
                skipped: plain.skipped,
            })
            .chain(rendered),
            diagnostics,
            &manifest::Options::default(),
        );
        for d in &set.diagnostics {
            outln!("{d}");
        }
        let e = set.diagnostics.iter().filter(|d| d.is_error()).count();
        errors += e;
        warnings += set.diagnostics.len() - e;
        files_n += plain.files + set.files - 1;
        objects += set.objects.len();
        skipped += set.skipped;
    }
    eprintln!(
        "{files_n} file(s), {objects} object(s), {skipped} skipped, {errors} error(s), {warnings} warning(s)"
    );
    if errors > 0 { 1 } else { 0 }
}

/// What a folder holds that makes it rendered, not read file by file.
fn rendered_kind(dir: &Path) -> Option<FolderKind> {
    if source::KUSTOMIZATION_FILES
        .iter()
        .any(|n| dir.join(n).is_file())
    {
        Some(FolderKind::Kustomize)
    } else if dir.join("Chart.yaml").is_file() {
        Some(FolderKind::Chart)
    } else {
        None
    }
}

/// Collects the files `validate` reads for one argument. A file named on the command line is
/// read whatever its name (if it is a regular file). A folder is read as the agent reads an
/// app's folder in Git: `*.yaml`, `*.yml` and `*.json` recursively, a symlink followed only
/// when its target stays inside the folder (any other link is an error on the link's path and
/// its target is never read), a folder reached twice through links is a cycle, and anything
/// that is not a regular file (a FIFO, a device) is an error. A folder holding a kustomization
/// file or a chart goes to `folders` instead of being read.
pub(super) fn collect_files(
    path: &Path,
    files: &mut Vec<(String, Vec<u8>)>,
    diags: &mut Vec<Diagnostic>,
    folders: &mut Vec<Folder>,
) {
    let shown = path.display().to_string();
    if path.is_dir() {
        match std::fs::canonicalize(path) {
            Ok(root) => {
                let mut visiting = std::collections::HashSet::new();
                walk_folder(&root, path, &shown, &mut visiting, files, diags, folders);
            }
            Err(e) => diags.push(Diagnostic::error(
                &shown,
                1,
                1,
                format!("cannot read folder: {e}"),
            )),
        }
        return;
    }
    read_regular_file(path, shown, files, diags);
}

pub(super) fn read_regular_file(
    path: &Path,
    shown: String,
    files: &mut Vec<(String, Vec<u8>)>,
    diags: &mut Vec<Diagnostic>,
) {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => match std::fs::read(path) {
            Ok(bytes) => files.push((shown, bytes)),
            Err(e) => diags.push(Diagnostic::error(
                &shown,
                1,
                1,
                format!("cannot read file: {e}"),
            )),
        },
        Ok(_) => diags.push(Diagnostic::error(
            &shown,
            1,
            1,
            "not a regular file; not read",
        )),
        Err(e) => diags.push(Diagnostic::error(
            &shown,
            1,
            1,
            format!("cannot read file: {e}"),
        )),
    }
}

pub(super) fn walk_folder(
    root: &Path,
    dir: &Path,
    shown: &str,
    visiting: &mut std::collections::HashSet<PathBuf>,
    files: &mut Vec<(String, Vec<u8>)>,
    diags: &mut Vec<Diagnostic>,
    folders: &mut Vec<Folder>,
) {
    if let Some(kind) = rendered_kind(dir) {
        let top = std::fs::canonicalize(dir).is_ok_and(|d| d == root);
        if kind == FolderKind::Chart && !top {
            // As the agent reads an app's path: a chart is rendered only as an app's own path.
            diags.push(Diagnostic::error(
                &format!("{}/Chart.yaml", shown.trim_end_matches('/')),
                1,
                1,
                format!("a Helm chart inside the folder is not rendered (an app renders a chart only at its own `source.path`): validate `{shown}` on its own, or give it an app of its own; nothing applied"),
            ));
            return;
        }
        folders.push(Folder {
            shown: shown.to_string(),
            dir: dir.to_path_buf(),
            kind,
        });
        return;
    }
    let real = match std::fs::canonicalize(dir) {
        Ok(r) => r,
        Err(e) => {
            diags.push(Diagnostic::error(
                shown,
                1,
                1,
                format!("cannot read folder: {e}"),
            ));
            return;
        }
    };
    if !visiting.insert(real.clone()) {
        diags.push(Diagnostic::error(
            shown,
            1,
            1,
            format!("symlink `{shown}` leads back into a folder it is in (a cycle); remove it"),
        ));
        return;
    }
    let mut children: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(e) => {
            diags.push(Diagnostic::error(
                shown,
                1,
                1,
                format!("cannot read folder: {e}"),
            ));
            visiting.remove(&real);
            return;
        }
    };
    children.sort();
    for child in children {
        let name = child
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let child_shown = format!("{}/{name}", shown.trim_end_matches('/'));
        let Ok(lmeta) = std::fs::symlink_metadata(&child) else {
            continue;
        };
        if lmeta.is_symlink() {
            let target = std::fs::read_link(&child)
                .map(|t| t.display().to_string())
                .unwrap_or_default();
            match std::fs::canonicalize(&child) {
                Err(_) => diags.push(Diagnostic::error(
                    &child_shown,
                    1,
                    1,
                    format!("symlink `{child_shown}` points to `{target}`, which does not exist"),
                )),
                Ok(dest) if !dest.starts_with(root) => diags.push(Diagnostic::error(
                    &child_shown,
                    1,
                    1,
                    format!("symlink `{child_shown}` points outside the folder (`{target}`); it is not followed"),
                )),
                Ok(dest) if dest.is_dir() => walk_folder(root, &child, &child_shown, visiting, files, diags, folders),
                Ok(_) if Renderer::Auto.wants(&name) => read_regular_file(&child, child_shown, files, diags),
                Ok(_) => {}
            }
        } else if lmeta.is_dir() {
            walk_folder(root, &child, &child_shown, visiting, files, diags, folders);
        } else if Renderer::Auto.wants(&name) {
            read_regular_file(&child, child_shown, files, diags);
        }
    }
    visiting.remove(&real);
}
