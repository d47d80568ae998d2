//! Benchmark (not a test): the render stage on a generated monorepo of 50 Kustomize overlays
//! sharing one base, with the real `kustomize` (`KUSTOMIZE_BIN`, as `scripts/test` builds it,
//! else `kustomize` on the PATH).
//!
//! Each app's pass is what the agent does at a fetch: `Render::prepare` (read the overlay, walk
//! its references on Git objects, compute the key), then, when the key differs from the one in
//! force, `Render::render` (write the reached folders out, run `kustomize build`, parse). Passes:
//!
//! - cold: the first commit, every app rendered;
//! - no-op: the same commit again;
//! - a commit elsewhere in the repository (a README);
//! - a commit to the shared base: every app rendered once.
//!
//! The floor, in the same run: `kustomize build` of one overlay on an ordinary checkout, the
//! binary's own time. Run with `cargo bench --bench render` (`-- --apps 100 --objects 40
//! --runs 5` for other sizes).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use driftless::object::Revision;
use driftless::render::Render;
use driftless::source::GitCache;

struct Args {
    apps: usize,
    objects: usize,
    runs: usize,
}

fn args() -> Args {
    let mut a = Args {
        apps: 50,
        objects: 20,
        runs: 5,
    };
    let argv: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < argv.len() {
        let next = || argv.get(i + 1).and_then(|v| v.parse().ok());
        match argv[i].as_str() {
            "--apps" => a.apps = next().unwrap_or(a.apps),
            "--objects" => a.objects = next().unwrap_or(a.objects),
            "--runs" => a.runs = next().unwrap_or(a.runs),
            _ => {}
        }
        i += 1;
    }
    a
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=Bench",
            "-c",
            "user.email=bench@example.com",
        ])
        .args(["-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn kustomize() -> String {
    std::env::var("KUSTOMIZE_BIN")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "kustomize".into())
}

/// The base: `objects` ConfigMaps and Deployments (half each), one file each.
fn write_base(repo: &Path, objects: usize, generation: usize) {
    let base = repo.join("base");
    std::fs::create_dir_all(&base).unwrap();
    let mut resources = String::from("resources:\n");
    for i in 0..objects {
        let (file, text) = if i % 2 == 0 {
            (
                format!("cm-{i}.yaml"),
                format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\ndata:\n  generation: \"{generation}\"\n  mode: \"0644\"\n"
                ),
            )
        } else {
            (
                format!("deploy-{i}.yaml"),
                format!(
                    "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: deploy-{i}\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: deploy-{i}}}\n  template:\n    metadata:\n      labels: {{app: deploy-{i}}}\n    spec:\n      containers:\n      - name: app\n        image: nginx:1.27\n        env:\n        - {{name: GENERATION, value: \"{generation}\"}}\n"
                ),
            )
        };
        std::fs::write(base.join(&file), text).unwrap();
        resources.push_str(&format!("- {file}\n"));
    }
    std::fs::write(base.join("kustomization.yaml"), resources).unwrap();
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

/// One pass over every app at `revision`; per app, the pass's time and whether it rendered.
async fn pass(
    git: &GitCache,
    renders: &mut [Render],
    keys: &mut [Option<String>],
    cfgs: &[driftless::config::AppConfig],
    revision: &Revision,
) -> (Vec<Duration>, usize, usize) {
    let mut times = Vec::new();
    let (mut rendered, mut reused) = (0, 0);
    for ((render, key), cfg) in renders.iter_mut().zip(keys.iter_mut()).zip(cfgs) {
        let started = Instant::now();
        // As the agent: all is read when no key is in force yet.
        let prepared = render
            .prepare(git, cfg, revision, key.is_none())
            .await
            .expect("prepare");
        if key.as_deref() == Some(prepared.key.as_str()) {
            // The agent's check: the key in force is the key of this revision.
            reused += 1;
        } else {
            *key = Some(prepared.key.clone());
            let set = render.render(git, prepared).await.expect("render");
            assert!(!set.has_errors(), "{:?}", set.first_error());
            rendered += render.runs().iter().filter(|r| r.rendered).count();
            reused += render.runs().iter().filter(|r| !r.rendered).count();
        }
        times.push(started.elapsed());
    }
    (times, rendered, reused)
}

#[tokio::main]
async fn main() {
    let a = args();
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    write_base(&repo, a.objects, 1);
    for i in 0..a.apps {
        let app = repo.join(format!("apps/app-{i}"));
        std::fs::create_dir_all(&app).unwrap();
        std::fs::write(
            app.join("kustomization.yaml"),
            format!("namePrefix: app-{i}-\nnamespace: app-{i}\nlabels:\n- pairs: {{team: t{}}}\nresources:\n- ../../base\npatches:\n- path: replicas.yaml\n  target: {{kind: Deployment}}\n", i % 5),
        )
        .unwrap();
        std::fs::write(
            app.join("replicas.yaml"),
            format!("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: any\nspec:\n  replicas: {}\n", 1 + i % 3),
        )
        .unwrap();
    }
    std::fs::write(repo.join("README.md"), "monorepo\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "50 overlays of one base"]);
    let url = repo.display().to_string();
    let mut config = format!("renderers: {{kustomize: \"{}\"}}\napps:\n", kustomize());
    for i in 0..a.apps {
        config.push_str(&format!(
            "  - name: app-{i}\n    source: {{repo: \"{url}\", path: apps/app-{i}}}\n"
        ));
    }
    let loaded = driftless::config::parse(&dir.path().join("driftless.yaml"), &config)
        .expect("the config parses");
    let cfgs = loaded.config.apps.clone();
    // The floor: kustomize alone on a checkout, the same overlay every time.
    let mut floor = Vec::new();
    for _ in 0..a.runs {
        let started = Instant::now();
        let out = Command::new(kustomize())
            .arg("build")
            .arg(repo.join("apps/app-0"))
            .output()
            .expect("kustomize runs");
        assert!(out.status.success());
        floor.push(started.elapsed());
    }
    let floor = median(&mut floor);

    let mut rows: Vec<(String, Vec<Duration>, usize, usize)> = Vec::new();
    let mut cold_runs = Vec::new();
    for run in 0..a.runs {
        let cache = dir.path().join(format!("cache-{run}"));
        let git_cache = GitCache::new(&cache);
        let head = git_cache.fetch(&url, None).await.expect("fetch").revision;
        let mut renders: Vec<Render> = cfgs.iter().map(Render::for_app).collect();
        let mut keys: Vec<Option<String>> = vec![None; cfgs.len()];
        let cold = pass(&git_cache, &mut renders, &mut keys, &cfgs, &head).await;
        cold_runs.push(cold.0.iter().sum::<Duration>());
        if run + 1 < a.runs {
            continue;
        }
        // The last run also measures the other passes.
        rows.push(("cold (first commit)".into(), cold.0, cold.1, cold.2));
        let noop = pass(&git_cache, &mut renders, &mut keys, &cfgs, &head).await;
        rows.push(("no-op pass (same commit)".into(), noop.0, noop.1, noop.2));
        std::fs::write(repo.join("README.md"), "monorepo, edited\n").unwrap();
        git(&repo, &["commit", "-q", "-am", "a commit elsewhere"]);
        let elsewhere = git_cache.fetch(&url, None).await.unwrap().revision;
        let e = pass(&git_cache, &mut renders, &mut keys, &cfgs, &elsewhere).await;
        rows.push(("commit elsewhere (README)".into(), e.0, e.1, e.2));
        write_base(&repo, a.objects, 2);
        git(&repo, &["commit", "-q", "-am", "a commit to the base"]);
        let base = git_cache.fetch(&url, None).await.unwrap().revision;
        let b = pass(&git_cache, &mut renders, &mut keys, &cfgs, &base).await;
        rows.push(("commit to the shared base".into(), b.0, b.1, b.2));
    }
    let cold_total = median(&mut cold_runs);
    println!(
        "render stage: {} Kustomize overlays of one base of {} objects, kustomize {}; medians per app; {} runs",
        a.apps,
        a.objects,
        String::from_utf8_lossy(
            &Command::new(kustomize())
                .arg("version")
                .output()
                .unwrap()
                .stdout
        )
        .trim(),
        a.runs
    );
    println!();
    println!(
        "| pass | per app (median) | vs floor | all apps | rendered | cache hits | hit rate |"
    );
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| floor: `kustomize build` of one overlay on a checkout | {} ms | 1.0x | | | | |",
        ms(floor)
    );
    for (name, mut times, rendered, reused) in rows {
        let total: Duration = times.iter().sum();
        let m = median(&mut times);
        let hit = if rendered + reused == 0 {
            0.0
        } else {
            reused as f64 * 100.0 / (rendered + reused) as f64
        };
        println!(
            "| {name} | {} ms | {:.2}x | {} ms | {rendered} | {reused} | {hit:.0}% |",
            ms(m),
            m.as_secs_f64() / floor.as_secs_f64(),
            ms(total)
        );
    }
    println!();
    println!(
        "cold pass of all apps, median of {} runs: {} ms",
        a.runs,
        ms(cold_total)
    );
}
