//! `helm template`: its arguments from `source.helm`, and its output split into the templates
//! it came from. Helm writes `# Source: <chart>/<file>` before the documents of each template
//! (`templates/`, `crds/`, subcharts under `charts/`), so a diagnostic can name the template's
//! path in the repository. No I/O here.

use std::ffi::OsString;

use crate::source::HelmConfig;

/// What `helm template` is run with.
#[derive(Clone, Debug)]
pub(super) struct Invocation<'a> {
    /// The release name.
    pub release: &'a str,
    /// The release namespace.
    pub namespace: &'a str,
    /// The chart: a folder or an archive, as the process's working folder sees it.
    pub chart: OsString,
    /// Values files in order, then the inline values' file, as the working folder sees them.
    pub values: Vec<OsString>,
    /// The app's settings.
    pub settings: &'a HelmConfig,
}

impl Invocation<'_> {
    /// `template RELEASE CHART --namespace NS [flags] [-f FILE]...`.
    pub fn args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec![
            "template".into(),
            self.release.into(),
            self.chart.clone(),
            "--namespace".into(),
            self.namespace.into(),
        ];
        let s = self.settings;
        if s.include_crds {
            a.push("--include-crds".into());
        }
        if s.skip_tests {
            a.push("--skip-tests".into());
        }
        if s.no_hooks {
            a.push("--no-hooks".into());
        }
        // `--flag=value`: a value that starts with `-` stays a value.
        if let Some(v) = &s.kube_version {
            a.push(format!("--kube-version={}", v.value).into());
        }
        for v in &s.api_versions {
            a.push(format!("--api-versions={}", v.value).into());
        }
        for f in &self.values {
            let mut arg = OsString::from("--values=");
            arg.push(f);
            a.push(arg);
        }
        a
    }
}

/// One template's part of the output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Segment {
    /// The template's path shown in diagnostics: `shown_root` joined with the path after the
    /// chart's name (`web/templates/deployment.yaml` → `<shown_root>/templates/deployment.yaml`).
    pub path: String,
    /// Its documents, starting with the `# Source:` line (line 1).
    pub text: String,
}

/// Splits `helm template` output at its `# Source:` lines. Text before the first one (helm
/// prints none) is a segment of its own named `shown_root`; segments that hold no documents
/// are dropped.
pub(super) fn split(output: &str, shown_root: &str) -> Vec<Segment> {
    let mut segments: Vec<Segment> = Vec::new();
    let mut current = Segment {
        path: shown_root.to_string(),
        text: String::new(),
    };
    for line in output.split_inclusive('\n') {
        if let Some(source) = line.trim_end().strip_prefix("# Source: ") {
            // The `---` that opened this template's document belongs to it.
            let opener = current
                .text
                .trim_end_matches(['\n', '\r'])
                .rsplit_once('\n')
                .map_or(current.text.trim_end(), |(_, last)| last)
                .trim()
                == "---";
            if opener {
                let cut = current.text.trim_end().len() - 3;
                current.text.truncate(cut);
            }
            segments.push(std::mem::replace(
                &mut current,
                Segment {
                    path: shown_path(shown_root, source.trim()),
                    text: String::new(),
                },
            ));
        }
        current.text.push_str(line);
    }
    segments.push(current);
    segments
        .into_iter()
        .filter(|s| {
            s.text.lines().any(|l| {
                !l.trim().is_empty() && !l.trim_start().starts_with('#') && l.trim() != "---"
            })
        })
        .collect()
}

/// `chart/templates/x.yaml` under `root`: the chart's own name is replaced by where it is.
fn shown_path(root: &str, source: &str) -> String {
    let rest = source.split_once('/').map_or(source, |(_, r)| r);
    if root.is_empty() {
        rest.to_string()
    } else {
        format!("{root}/{rest}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_split_by_template_with_repository_paths() {
        let out = "---\n# Source: web/templates/sa.yaml\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\n---\n# Source: web/charts/redis/templates/svc.yaml\napiVersion: v1\nkind: Service\nmetadata:\n  name: b\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: c\n---\n# Source: web/templates/empty.yaml\n# nothing\n";
        let s = split(out, "charts/web");
        let paths: Vec<&str> = s.iter().map(|s| s.path.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                "charts/web/templates/sa.yaml",
                "charts/web/charts/redis/templates/svc.yaml"
            ]
        );
        assert!(
            s[0].text
                .starts_with("# Source: web/templates/sa.yaml\napiVersion: v1")
        );
        assert!(s[0].text.ends_with("name: a\n"), "{:?}", s[0].text);
        assert!(
            s[1].text
                .contains("name: b\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: c\n")
        );
        assert_eq!(split(out, "")[0].path, "templates/sa.yaml");
    }

    #[test]
    fn the_arguments_follow_the_settings() {
        let settings = HelmConfig {
            no_hooks: true,
            api_versions: vec![crate::yaml::unspanned("a.io/v1".to_string())],
            ..HelmConfig::default()
        };
        let inv = Invocation {
            release: "web",
            namespace: "prod",
            chart: "./apps/web".into(),
            values: vec!["./apps/values-prod.yaml".into()],
            settings: &settings,
        };
        let args: Vec<String> = inv
            .args()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args.join(" "),
            "template web ./apps/web --namespace prod --include-crds --skip-tests --no-hooks --api-versions=a.io/v1 --values=./apps/values-prod.yaml"
        );
    }
}
