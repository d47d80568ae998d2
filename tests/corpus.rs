//! Every file of the corpus (`tests/data/corpus`, a copy of `../shared/corpus`) (real manifests from public repositories, messy on purpose)
//! gives an object, a skip with a warning, or an error naming file and line; never a panic.

mod common;

use std::path::{Path, PathBuf};

use driftless::manifest::{self, Severity};

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// `(path relative to the corpus, bytes)` of every manifest file under `sub`.
fn files(sub: &str) -> Vec<(String, Vec<u8>)> {
    let root = common::data_dir().join("corpus");
    let mut paths = Vec::new();
    walk(&root.join(sub), &mut paths);
    paths.sort();
    paths
        .into_iter()
        .filter_map(|p| {
            let rel = p
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            manifest::is_manifest_path(&rel).then(|| (rel, std::fs::read(&p).unwrap()))
        })
        .collect()
}

#[derive(Debug, Default, PartialEq)]
struct Counts {
    files: usize,
    objects: usize,
    skipped: usize,
    files_with_errors: usize,
    errors: usize,
    warnings: usize,
}

#[test]
fn every_corpus_file_gives_an_object_a_skip_or_an_error_with_its_line() {
    let mut c = Counts::default();
    for (path, bytes) in files("") {
        let r = manifest::parse_file(&path, &bytes);
        c.files += 1;
        c.objects += r.objects.len();
        c.skipped += r.skipped;
        let errors = r
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count();
        c.errors += errors;
        c.warnings += r.diagnostics.len() - errors;
        c.files_with_errors += usize::from(errors > 0);
        assert!(
            !r.objects.is_empty() || !r.diagnostics.is_empty(),
            "{path} gave neither an object nor a diagnostic"
        );
        for d in &r.diagnostics {
            assert_eq!(d.path, path);
            assert!(d.line >= 1 && d.column >= 1, "{d}");
            assert!(!d.message.is_empty(), "{d}");
        }
        if r.skipped > 0 {
            assert!(
                r.diagnostics
                    .iter()
                    .any(|d| d.severity == Severity::Warning),
                "{path}: a skip always warns"
            );
        }
    }
    // The numbers as reviewed by hand: 27 errors in 20 files (duplicate keys in 5 archived
    // manifests; `{{...}}` templates in 4 vitess and 2 newrelic files, two of the vitess files
    // with templates both in metadata and in the spec, all reported in one round; two kube-scheduler Policy
    // files with apiVersion and kind but no metadata; 7 kustomization.yaml files, which the
    // render stage builds with kustomize and the parser alone refuses), 8 skips (6 files holding only comments, 2 cassandra config files), and 3 warnings
    // for kinds Kubernetes does not serve (an `InitializerConfiguration`, removed in 1.14, and
    // two kube-scheduler `Policy` files, which are config files, not API objects).
    assert_eq!(
        c,
        Counts {
            files: 288,
            objects: 297,
            skipped: 8,
            files_with_errors: 20,
            errors: 27,
            warnings: 11
        }
    );
}

#[test]
fn known_corpus_problems_are_reported_at_their_line() {
    let find = |path: &str| {
        let (_, bytes) = files("").into_iter().find(|(p, _)| p == path).unwrap();
        manifest::parse_file(path, &bytes)
            .diagnostics
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        find("kubernetes-examples/_archived/volumes/scaleio/sc-pvc.yaml"),
        vec![
            "kubernetes-examples/_archived/volumes/scaleio/sc-pvc.yaml:12:3: error: duplicate key `storageClassName`"
        ]
    );
    let vitess = find("kubernetes-examples/_archived/storage/vitess/etcd-service-template.yaml");
    assert!(
        vitess[0].contains(":4:9: error: invalid metadata.name `etcd-{{cell}}`"),
        "{vitess:?}"
    );
}

#[test]
fn flux_overlays_declaring_one_object_twice_are_conflicts_naming_both_files() {
    // Parsing the whole Flux example as one desired set: the staging and production overlays
    // declare the same objects.
    let files = files("flux2-kustomize-helm-example");
    let set = manifest::parse_set(
        files.iter().map(|(p, b)| (p.as_str(), b.as_slice())),
        Vec::new(),
        &manifest::Options::default(),
    );
    let twice: Vec<&str> = set
        .diagnostics
        .iter()
        .filter(|d| d.is_error() && d.message.contains("is declared twice"))
        .map(|d| d.message.as_str())
        .collect();
    assert!(!twice.is_empty());
    for m in &twice {
        assert!(m.contains("flux2-kustomize-helm-example/"), "{m}");
    }
    // Each overlay read as plain files (as before rendering existed) is refused whole, naming
    // its kustomization file: the parser alone never applies a patch fragment as an object.
    // The render stage builds these folders with kustomize (tests/render.rs).
    for overlay in [
        "flux2-kustomize-helm-example/apps/staging",
        "flux2-kustomize-helm-example/apps/production",
    ] {
        let f: Vec<_> = files
            .iter()
            .filter(|(p, _)| p.starts_with(overlay))
            .collect();
        let set = manifest::parse_set(
            f.iter().map(|(p, b)| (p.as_str(), b.as_slice())),
            Vec::new(),
            &manifest::Options::default(),
        );
        let errors: Vec<String> = set
            .diagnostics
            .iter()
            .filter(|d| d.is_error())
            .map(|d| d.to_string())
            .collect();
        assert_eq!(errors.len(), 1, "{overlay}: {errors:?}");
        assert!(
            errors[0].starts_with(&format!(
                "{overlay}/kustomization.yaml:1:1: error: a Kustomize overlay"
            )),
            "{errors:?}"
        );
    }
}
