//! The health rules on fixtures of our own, through `driftless health -f -o json`:
//!
//! - `tests/data/health/generic/<pattern>/<verdict>-<case>.yaml`: one or more per generic pattern
//!   (src/health/generic.rs), decided by the generic rules (`rule: generic`);
//! - `tests/data/health/builtin/<group>/<Kind>/<verdict>-<case>.yaml`: one or more per built-in
//!   operator rule (src/health/operators/), decided by that rule (`rule: builtin`).
//!
//! `<verdict>` is the expected health in lower case (`healthy`, `progressing`, `degraded`,
//! `suspended`, `unknown`). A fixture may start with `# message: TEXT` lines: each TEXT must be
//! in the message. A file may hold CustomResourceDefinitions besides the object: they are the
//! kinds known to have a status subresource, and are not checked themselves.

use std::path::{Path, PathBuf};
use std::process::Command;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/health")
}

fn fixtures(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "yaml") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Checks every fixture under `root`; returns how many objects were checked.
fn check(root: &Path, rule: &str) -> usize {
    let mut failures = Vec::new();
    let mut checked = 0;
    for f in fixtures(root) {
        let name = f.file_stem().unwrap().to_string_lossy().to_string();
        let want = name.split('-').next().unwrap().to_string();
        let text = std::fs::read_to_string(&f).unwrap();
        let messages: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# message: "))
            .collect();
        let out = Command::new(env!("CARGO_BIN_EXE_driftless"))
            .args(["health", "-o", "json", "-f"])
            .arg(&f)
            .current_dir(std::env::temp_dir())
            .output()
            .unwrap();
        let shown = f.strip_prefix(root).unwrap().display().to_string();
        assert!(
            out.status.success(),
            "{shown}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let objects: Vec<&serde_json::Value> = v["objects"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["kind"] != "CustomResourceDefinition")
            .collect();
        assert!(!objects.is_empty(), "{shown}: no object");
        for o in objects {
            checked += 1;
            let health = o["health"].as_str().unwrap().to_ascii_lowercase();
            let message = o["message"].as_str().unwrap();
            let got_rule = o["rule"].as_str().unwrap();
            if health != want || got_rule != rule {
                failures.push(format!(
                    "{shown}: want {want} by {rule}, got {health} by {got_rule}: {message}"
                ));
            }
            for m in &messages {
                if !message.contains(m) {
                    failures.push(format!("{shown}: message {message:?} lacks {m:?}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    checked
}

#[test]
fn every_generic_pattern_fixture_gets_its_verdict_from_the_generic_rules() {
    let n = check(&data().join("generic"), "generic");
    assert!(n >= 20, "only {n} generic fixtures");
}

#[test]
fn every_operator_fixture_gets_its_verdict_from_its_built_in_rule() {
    let n = check(&data().join("builtin"), "builtin");
    assert!(n >= 40, "only {n} operator fixtures");
}

/// Runs `driftless [-c CONFIG] health -o json -f -` on `objects`; returns the exit code, the
/// objects' `(kind/name, health, message, rule)`, and stderr.
type Row = (String, String, String, String);

/// Runs `driftless [--config CONFIG] health [-o json] -f -` on `objects` in a folder of its own;
/// returns the exit code, stdout and stderr.
fn run_health(config: Option<&str>, objects: &str, json: bool) -> (i32, String, String) {
    use std::io::Write;
    let dir = tempdir();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_driftless"));
    if let Some(c) = config {
        std::fs::write(dir.join("driftless.yaml"), c).unwrap();
        cmd.arg("--config").arg(dir.join("driftless.yaml"));
    }
    cmd.arg("health");
    if json {
        cmd.args(["-o", "json"]);
    }
    let mut child = cmd
        .args(["-f", "-"])
        .current_dir(&dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(objects.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// [`run_health`] with `-o json`: the objects' `(kind/name, health, message, rule)`.
fn health_with(config: Option<&str>, objects: &str) -> (i32, Vec<Row>, String) {
    let (code, stdout, stderr) = run_health(config, objects, true);
    if code != 0 {
        return (code, Vec::new(), stderr);
    }
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let rows = v["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let s = |k: &str| o[k].as_str().unwrap_or_default().to_string();
            (
                format!("{}/{}", s("kind"), s("name")),
                s("health"),
                s("message"),
                s("rule"),
            )
        })
        .collect();
    (code, rows, stderr)
}

fn tempdir() -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "driftless-health-rules-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn lua_dir(name: &str) -> String {
    data().join(name).display().to_string()
}

const WIDGETS: &str = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: ok}\nstatus:\n  conditions:\n  - {type: Ready, status: \"True\", message: all parts in place}\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: broken}\nstatus:\n  conditions:\n  - {type: Ready, status: \"True\"}\n  - {type: AssemblyFailed, status: \"True\", message: missing bolt}\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: new}\n---\napiVersion: shop.example.org/v2\nkind: Basket\nmetadata: {name: b}\nstatus: {phase: Error, error: payment declined}\n---\napiVersion: shop.example.org/v2\nkind: Basket\nmetadata: {name: quiet}\nstatus: {conditions: [{type: Ready, status: \"True\"}]}\n";

#[test]
fn a_folder_laid_out_like_argo_cds_runs_its_scripts_unchanged() {
    let config = format!("healthLuaDir: {}\n", lua_dir("lua"));
    let (code, rows, err) = health_with(Some(&config), WIDGETS);
    assert_eq!(code, 0, "{err}");
    let widget = data()
        .join("lua/example.com/Widget/health.lua")
        .display()
        .to_string();
    let wildcard = data()
        .join("lua/_.example.org/_/health.lua")
        .display()
        .to_string();
    let want = [
        (
            "Widget/ok",
            "Healthy",
            "all parts in place",
            widget.as_str(),
        ),
        (
            "Widget/broken",
            "Degraded",
            "AssemblyFailed: missing bolt",
            widget.as_str(),
        ),
        (
            "Widget/new",
            "Progressing",
            "Waiting for the widget to report its conditions",
            widget.as_str(),
        ),
        (
            "Basket/b",
            "Degraded",
            "payment declined",
            wildcard.as_str(),
        ),
    ];
    for (i, (name, health, message, origin)) in want.iter().enumerate() {
        assert_eq!(rows[i].0, *name);
        assert_eq!(
            (rows[i].1.as_str(), rows[i].2.as_str()),
            (*health, *message),
            "{name}"
        );
        assert_eq!(rows[i].3, format!("lua:{origin}"), "{name}");
    }
    // The wildcard script returns nothing without a phase: the built-in rules decide.
    assert_eq!(rows[4].0, "Basket/quiet");
    assert_eq!(
        (rows[4].1.as_str(), rows[4].3.as_str()),
        ("Healthy", "generic")
    );
}

#[test]
fn health_entries_come_first_exact_before_wildcard_then_the_folder() {
    let dir = tempdir();
    let script = dir.join("all-healthy.lua");
    std::fs::write(
        &script,
        "return {status = \"Healthy\", message = \"says the override for \" .. obj.metadata.name}\n",
    )
    .unwrap();
    let config = format!(
        "health:\n- {{group: \"*.example.org\", kind: \"*\", lua: {}}}\n- {{group: example.com, kind: Widget, degraded: \"has(status.conditions) && size(status.conditions) > 1\"}}\nhealthLuaDir: {}\n",
        script.display(),
        lua_dir("lua")
    );
    let (code, rows, err) = health_with(Some(&config), WIDGETS);
    assert_eq!(code, 0, "{err}");
    // The CEL rule decides when one of its expressions is true, the folder otherwise.
    assert_eq!(
        (rows[1].1.as_str(), rows[1].3.as_str()),
        ("Degraded", "cel")
    );
    assert_eq!(rows[0].1, "Healthy");
    assert!(rows[0].3.ends_with("Widget/health.lua"), "{:?}", rows[0]);
    // The `*` entry wins over the folder's wildcard script for example.org's kinds.
    assert_eq!(
        (rows[3].1.as_str(), rows[3].2.as_str()),
        ("Healthy", "says the override for b")
    );
    assert_eq!(rows[3].3, format!("lua:{}", script.display()));
}

#[test]
fn scripts_that_loop_hog_escape_or_fail_are_unknown_and_the_next_object_is_still_assessed() {
    let config = format!("healthLuaDir: {}\n", lua_dir("lua-failing"));
    let marker = Path::new("/tmp/driftless-lua-escaped");
    let _ = std::fs::remove_file(marker);
    let objects: String = ["Spinner", "Hog", "Escaper", "Snoop", "Boom"]
        .iter()
        .map(|k| format!("apiVersion: example.com/v1\nkind: {k}\nmetadata: {{name: x}}\n---\n"))
        .collect::<String>()
        + "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: after}\n";
    let started = std::time::Instant::now();
    let (code, rows, err) = health_with(Some(&config), &objects);
    let took = started.elapsed();
    assert_eq!(code, 0, "{err}");
    let by: std::collections::BTreeMap<&str, (&str, &str)> = rows
        .iter()
        .map(|r| (r.0.as_str(), (r.1.as_str(), r.2.as_str())))
        .collect();
    for (name, words) in [
        ("Spinner/x", "time limit of 1 s"),
        ("Hog/x", "limit"),
        ("Escaper/x", "execute"),
        ("Snoop/x", "io"),
        ("Boom/x", "boom"),
    ] {
        let (health, message) = by[name];
        assert_eq!(health, "Unknown", "{name}: {message}");
        assert!(message.contains(words), "{name}: {message}");
    }
    assert_eq!(by["ConfigMap/after"].0, "Healthy");
    assert!(!marker.exists(), "os.execute ran");
    // One second for the loop, up to one for the hog, and little else.
    assert!(took < std::time::Duration::from_secs(10), "{took:?}");
}

#[test]
fn a_lua_check_that_does_not_compile_or_clashes_with_cel_is_a_config_error() {
    let bad_dir = format!("healthLuaDir: {}\n", lua_dir("lua-bad"));
    for (config, words) in [
        (
            bad_dir.as_str(),
            ["healthLuaDir", "example.com/Broken/health.lua:5:"],
        ),
        (
            "health:\n- {kind: Widget, lua: w.lua, healthy: \"true\"}\n",
            ["health[0].lua", "both"],
        ),
        (
            "health:\n- {kind: Widget, lua: missing.lua}\n",
            ["health[0].lua", "missing.lua"],
        ),
    ] {
        let (code, _, err) = health_with(Some(config), WIDGETS);
        assert_eq!(code, 2, "{err}");
        assert!(words.iter().all(|w| err.contains(w)), "{err}");
    }
}

#[test]
fn a_message_with_line_breaks_stays_on_one_line_of_the_table() {
    let dir = tempdir();
    let script = dir.join("two-lines.lua");
    std::fs::write(
        &script,
        "return {status = \"Degraded\", message = \"first\\nfake: Healthy\"}\n",
    )
    .unwrap();
    let config = format!(
        "health:\n- {{group: example.com, kind: Widget, lua: {}}}\n",
        script.display()
    );
    let (code, stdout, stderr) = run_health(
        Some(&config),
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n",
        false,
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        "Widget.example.com w: Degraded: first\\nfake: Healthy\n"
    );
}
