//! How often `driftless health -f` agrees with Argo CD's health checks on Argo CD's own test data.
//!
//! ```text
//! cargo build --release
//! cargo run --release --example health_agreement -- PATH/TO/argo-cd/resource_customizations
//! ```
//!
//! Argo CD (`argoproj/argo-cd`, Apache-2.0) keeps, for each kind it has a Lua health check for,
//! `resource_customizations/<group>/<kind>/health_test.yaml`: a list of
//! `{healthStatus: {status, message}, inputPath}` where `inputPath` is a live object in
//! `testdata/`. None of it is copied into this repository: the folder is an argument (fetch it
//! with `git clone --depth 1 https://github.com/argoproj/argo-cd`).
//!
//! For each test the tool runs the `driftless` binary (`target/release/driftless`, or
//! `--driftless PATH`) twice, and a third time (below):
//!
//! 1. `driftless health -f INPUT -o json` with no config: driftless's own rules alone;
//! 2. the same with a config whose `healthLuaDir` is the folder: Argo CD's scripts as a user's
//!    Lua health checks.
//!
//! and compares the verdict (`status`) with the expected one. A third run gives driftless's own
//! rules each custom kind's CustomResourceDefinition (declaring a status subresource, as the CRD
//! of a kind with a controller does) in the same file, as the agent sees it in a cluster: an
//! object with no status at all then reads as not yet seen by its controller. It prints agreement overall, for
//! the objects a kind-specific rule of driftless decided, and for those the generic rules decided
//! (the `rule` field of the JSON output), and how many objects got `Healthy` where the expected
//! verdict is `Degraded` (must be 0). `--list` prints every disagreement.
//!
//! Inputs without `metadata.name` (many of Argo CD's are partial objects) get
//! `metadata.name: unnamed` in a JSON copy, since driftless refuses a nameless object as it
//! would in Git; the count is printed.
//!
//! Exit: 0 when it measured, 2 on bad arguments or an unreadable folder.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
struct TestFile {
    #[serde(default)]
    tests: Vec<Case>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Case {
    health_status: Expected,
    // One of Argo CD's files spells it `inputpath` (its YAML reader ignores case).
    #[serde(alias = "inputpath")]
    input_path: String,
}

#[derive(Deserialize)]
struct Expected {
    status: String,
    #[serde(default)]
    message: String,
}

/// What driftless said of one input.
struct Verdict {
    health: String,
    message: String,
    rule: String,
}

/// Argo CD's test inputs are often partial objects without `metadata.name`, which driftless
/// refuses as it would in Git. Such an input is given to driftless as JSON with
/// `metadata.name: unnamed` added (the name plays no part in any health rule); `None` when the
/// input has a name (or cannot be read: driftless then says why).
fn named_copy(input: &Path, scratch: &Path, n: usize) -> Option<PathBuf> {
    let text = std::fs::read_to_string(input).ok()?;
    let mut v: Value = serde_saphyr::from_str(&text).ok()?;
    let o = v.as_object_mut()?;
    let meta = o
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    if meta.is_null() {
        *meta = Value::Object(Default::default());
    }
    let meta = meta.as_object_mut()?;
    if meta
        .get("name")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty())
    {
        return None;
    }
    meta.insert("name".into(), Value::from("unnamed"));
    let copy = scratch.join(format!("input-{n}.json"));
    std::fs::write(&copy, serde_json::to_vec(&v).ok()?).ok()?;
    Some(copy)
}

/// The input with a CustomResourceDefinition for its kind before it, declaring a status
/// subresource (as the CRD of a kind with a controller does in a cluster): `None` for a kind
/// of Kubernetes' own groups or an input that cannot be read.
fn with_crd(input: &Path, scratch: &Path, n: usize) -> Option<PathBuf> {
    let text = std::fs::read_to_string(input).ok()?;
    let v: Value = serde_saphyr::from_str(&text).ok()?;
    let api = v.get("apiVersion")?.as_str()?;
    let kind = v.get("kind")?.as_str()?;
    let (group, _) = api.split_once('/')?;
    if !driftless::health::is_custom_group(group) {
        return None;
    }
    let plural = format!("{}s", kind.to_ascii_lowercase());
    let crd = serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "subresources": {"status": {}}}],
        },
    });
    let copy = scratch.join(format!("with-crd-{n}.yaml"));
    std::fs::write(&copy, format!("{crd}\n---\n{text}")).ok()?;
    Some(copy)
}

fn run(driftless: &Path, config: Option<&Path>, input: &Path) -> Result<Verdict, String> {
    let mut cmd = Command::new(driftless);
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    let out = cmd
        .args(["health", "-o", "json", "-f"])
        .arg(input)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", driftless.display()))?;
    if !out.status.success() {
        return Err(format!(
            "exit {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    let mut objects = v["objects"].as_array().cloned().unwrap_or_default();
    // The CRD `with_crd` put first is not the object under test.
    if objects.len() == 2 && objects[0]["kind"] == "CustomResourceDefinition" {
        objects.remove(0);
    }
    let [o] = objects.as_slice() else {
        return Err(format!("{} objects in the input, not 1", objects.len()));
    };
    let s = |k: &str| o[k].as_str().unwrap_or_default().to_string();
    Ok(Verdict {
        health: s("health"),
        message: s("message"),
        rule: s("rule"),
    })
}

#[derive(Default)]
struct Tally {
    total: usize,
    agreed: usize,
    messages: usize,
    healthy_for_degraded: usize,
}

impl Tally {
    fn add(&mut self, expected: &Expected, got: &Result<Verdict, String>) {
        self.total += 1;
        if let Ok(v) = got {
            if v.health == expected.status {
                self.agreed += 1;
                if v.message == expected.message {
                    self.messages += 1;
                }
            }
            if v.health == "Healthy" && expected.status == "Degraded" {
                self.healthy_for_degraded += 1;
            }
        }
    }

    fn row(&self, name: &str) -> String {
        let pct = |n: usize| {
            if self.total == 0 {
                0.0
            } else {
                100.0 * n as f64 / self.total as f64
            }
        };
        format!(
            "| {name} | {} | {} ({:.1}%) | {} ({:.1}%) | {} |",
            self.total,
            self.agreed,
            pct(self.agreed),
            self.messages,
            pct(self.messages),
            self.healthy_for_degraded
        )
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut folder = None;
    let mut driftless = PathBuf::from("target/release/driftless");
    let mut list = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--driftless" => driftless = args.next().map(PathBuf::from).unwrap_or(driftless),
            "--list" => list = true,
            _ if folder.is_none() && !a.starts_with('-') => folder = Some(PathBuf::from(a)),
            _ => {
                eprintln!(
                    "usage: health_agreement [--driftless PATH] [--list] RESOURCE_CUSTOMIZATIONS"
                );
                std::process::exit(2);
            }
        }
    }
    let Some(folder) = folder else {
        eprintln!("usage: health_agreement [--driftless PATH] [--list] RESOURCE_CUSTOMIZATIONS");
        std::process::exit(2);
    };
    let folder = match folder.canonicalize() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{}: {e}", folder.display());
            std::process::exit(2);
        }
    };
    let scratch = std::env::temp_dir().join(format!("health-agreement-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("temp dir");
    let config = scratch.join("driftless.yaml");
    std::fs::write(
        &config,
        format!(
            "healthLuaDir: {}\n",
            serde_json::to_string(&folder.display().to_string()).expect("path")
        ),
    )
    .expect("config");

    // <group>/<kind>/health_test.yaml, sorted.
    let mut files = Vec::new();
    for group in std::fs::read_dir(&folder).expect("folder").flatten() {
        for kind in std::fs::read_dir(group.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let f = kind.path().join("health_test.yaml");
            if f.is_file() {
                files.push(f);
            }
        }
    }
    files.sort();

    let (mut own, mut specific, mut generic, mut lua) = Default::default();
    let (own, specific, generic, lua): (&mut Tally, &mut Tally, &mut Tally, &mut Tally) =
        (&mut own, &mut specific, &mut generic, &mut lua);
    let (mut crd_own, mut crd_specific, mut crd_generic, mut lifecycle) = (
        Tally::default(),
        Tally::default(),
        Tally::default(),
        Tally::default(),
    );
    let mut by_rule: BTreeMap<String, usize> = BTreeMap::new();
    let mut kinds = 0;
    let mut renamed = 0;
    let mut errors = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read");
        let tests: TestFile = match serde_saphyr::from_str(&text) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{}: {e}", f.display());
                continue;
            }
        };
        kinds += 1;
        let dir = f.parent().expect("kind folder");
        let label = dir
            .strip_prefix(&folder)
            .unwrap_or(dir)
            .display()
            .to_string();
        for case in &tests.tests {
            let mut input = dir.join(&case.input_path);
            if let Some(copy) = named_copy(&input, &scratch, own.total) {
                input = copy;
                renamed += 1;
            }
            let mine = run(&driftless, None, &input);
            let theirs = run(&driftless, Some(&config), &input);
            own.add(&case.health_status, &mine);
            lua.add(&case.health_status, &theirs);
            let in_cluster = match with_crd(&input, &scratch, own.total) {
                Some(combined) => run(&driftless, None, &combined),
                None => run(&driftless, None, &input),
            };
            match in_cluster.as_ref().map(|v| v.rule.as_str()) {
                Ok("generic") => crd_generic.add(&case.health_status, &in_cluster),
                Ok("lifecycle") => {}
                Ok(_) => crd_specific.add(&case.health_status, &in_cluster),
                Err(_) => {}
            }
            crd_own.add(&case.health_status, &in_cluster);
            match mine.as_ref().map(|v| v.rule.as_str()) {
                Ok("generic") => generic.add(&case.health_status, &mine),
                Ok("lifecycle") => lifecycle.add(&case.health_status, &mine),
                Ok(_) => specific.add(&case.health_status, &mine),
                Err(_) => errors += 1,
            }
            if let Ok(v) = &mine {
                *by_rule.entry(v.rule.clone()).or_default() += 1;
            }
            if list {
                for (mode, got) in [("own", &mine), ("lua", &theirs)] {
                    match got {
                        Ok(v) if v.health == case.health_status.status => {}
                        Ok(v) => println!(
                            "{mode}\t{label}/{}\texpected {}\tgot {} ({}): {}",
                            case.input_path, case.health_status.status, v.health, v.rule, v.message
                        ),
                        Err(e) => println!("{mode}\t{label}/{}\terror: {e}", case.input_path),
                    }
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);

    println!(
        "Argo CD health tests in {}: {kinds} kinds, {} objects",
        folder.display(),
        own.total
    );
    println!();
    println!(
        "| rules | objects | verdict agrees | message agrees too | Healthy where Degraded expected |"
    );
    println!("|---|---|---|---|---|");
    println!("{}", own.row("driftless's own rules"));
    println!("{}", specific.row("  decided by a kind-specific rule"));
    println!("{}", generic.row("  decided by the generic rules"));
    println!(
        "{}",
        lifecycle.row("  being deleted (Progressing before any rule, as in Argo CD's controller)")
    );
    println!(
        "{}",
        crd_own.row("own rules, each custom kind's CRD in view (status subresource)")
    );
    println!("{}", crd_specific.row("  decided by a kind-specific rule"));
    println!("{}", crd_generic.row("  decided by the generic rules"));
    println!("{}", lua.row("Argo CD's folder as healthLuaDir"));
    println!();
    println!("own rules by kind of rule: {by_rule:?}; refused by driftless: {errors}");
    println!("inputs without metadata.name, given to driftless with `name: unnamed`: {renamed}");
}
