//! The health verdicts of argoproj/gitops-engine's test data
//! (`tests/data/conformance/gitops-engine/health`): every file is assessed as its
//! `expected.tsv` says.

mod common;

use driftless::health::{self, CustomRules, Health};
use driftless::manifest;

fn dir() -> std::path::PathBuf {
    common::data_dir().join("conformance/gitops-engine/health")
}

fn parse_health(s: &str) -> Option<Health> {
    Some(match s {
        "Healthy" => Health::Healthy,
        "Progressing" => Health::Progressing,
        "Suspended" => Health::Suspended,
        "Degraded" => Health::Degraded,
        "Missing" => Health::Missing,
        "Unknown" => Health::Unknown,
        _ => return None,
    })
}

#[test]
fn every_fixture_gets_the_health_expected_tsv_gives() {
    let expected = std::fs::read_to_string(dir().join("expected.tsv")).unwrap();
    let mut checked = 0;
    let mut failures = Vec::new();
    for line in expected.lines().skip(1) {
        let (file, want) = line.split_once('\t').unwrap();
        let bytes = std::fs::read(dir().join(file)).unwrap();
        // Read through driftless's own manifest parser, as the agent would.
        let parsed = manifest::parse_file_with(file, &bytes, manifest::Mode::Live);
        if want.starts_with("any") && parsed.diagnostics.iter().any(|d| d.is_error()) {
            // No verdict is expected: an object that is not valid (the Application fixtures
            // have no metadata) may be refused, with its line, as long as nothing panics.
            assert!(parsed.diagnostics.iter().all(|d| d.line >= 1), "{file}");
            checked += 1;
            continue;
        }
        assert!(
            parsed.diagnostics.iter().all(|d| !d.is_error()),
            "{file}: {:?}",
            parsed.diagnostics
        );
        assert_eq!(parsed.objects.len(), 1, "{file}");
        let got = health::assess(
            Some(&parsed.objects[0].object),
            &CustomRules::none(),
            &health::StatusKinds::none(),
        );
        match parse_health(want) {
            Some(want) if got.health != want => failures.push(format!(
                "{file}: want {want:?}, got {:?} ({})",
                got.health, got.message
            )),
            Some(_) => {}
            None => assert!(want.starts_with("any"), "{file}: {want}"),
        }
        checked += 1;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(checked, 49, "every line of expected.tsv");
}
