//! What a renderer's error message must not show: the values of Secrets that its input holds.
//! kustomize quotes a `secretGenerator` literal it cannot read; helm quotes a value a chart's
//! schema refuses. Before a renderer's standard error becomes a condition, a log line or a
//! commit status, every such value found in what the render read is replaced by `(hidden)`.
//! Pure: it reads the files already read from Git.

use serde_json::Value;

use crate::source::{Files, KUSTOMIZATION_FILES};

/// Shorter values are not hidden: they would blank out ordinary words of the message.
const MIN_LEN: usize = 4;

/// The values to hide for a render over `files`: `secretGenerator` literals and the contents
/// of the files and env files it names, the `data` and `stringData` of Secret documents (and
/// `data` decoded), and every string of the Helm values given (`values`, and each file in
/// `values_files`).
pub(super) fn sensitive(
    files: &Files,
    values: Option<&Value>,
    values_files: &[String],
) -> Vec<String> {
    let mut out = Vec::new();
    let text = |path: &str| {
        files
            .files
            .iter()
            .find(|(p, _)| p == path)
            .and_then(|(_, b)| std::str::from_utf8(b).ok())
    };
    for (path, bytes) in &files.files {
        let Ok(body) = std::str::from_utf8(bytes) else {
            continue;
        };
        let name = path.rsplit('/').next().unwrap_or(path);
        let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
        if KUSTOMIZATION_FILES.contains(&name) {
            if !body.contains("secretGenerator") {
                continue;
            }
            let Ok(k) = serde_saphyr::from_str::<Value>(body) else {
                continue;
            };
            for g in k["secretGenerator"].as_array().into_iter().flatten() {
                for l in g["literals"].as_array().into_iter().flatten() {
                    if let Some(l) = l.as_str() {
                        out.push(l.to_string());
                        if let Some((_, v)) = l.split_once('=') {
                            out.push(v.to_string());
                        }
                    }
                }
                let named = |v: &Value| -> Vec<String> {
                    match v {
                        Value::String(s) => vec![s.clone()],
                        Value::Array(a) => a
                            .iter()
                            .filter_map(|s| s.as_str().map(String::from))
                            .collect(),
                        _ => Vec::new(),
                    }
                };
                let mut referenced = named(&g["files"]);
                referenced.extend(named(&g["envs"]));
                referenced.extend(named(&g["env"]));
                for r in referenced {
                    let file = r.split_once('=').map_or(r.as_str(), |(_, f)| f);
                    let Some(joined) = super::kustomize::normalize(&super::join(dir, file)) else {
                        continue;
                    };
                    if let Some(content) = text(&joined) {
                        out.push(content.trim().to_string());
                        for line in content.lines() {
                            out.push(line.trim().to_string());
                            if let Some((_, v)) = line.split_once('=') {
                                out.push(v.trim().to_string());
                            }
                        }
                    }
                }
            }
        } else if (name.ends_with(".yaml") || name.ends_with(".yml") || name.ends_with(".json"))
            && body.contains("Secret")
        {
            for doc in serde_saphyr::from_multiple::<Value>(body).unwrap_or_default() {
                if doc["kind"] != "Secret" {
                    continue;
                }
                for field in ["data", "stringData"] {
                    for v in doc[field].as_object().into_iter().flat_map(|m| m.values()) {
                        if let Some(s) = v.as_str() {
                            out.push(s.to_string());
                            if field == "data" {
                                use base64::Engine as _;
                                if let Ok(d) = base64::engine::general_purpose::STANDARD.decode(s)
                                    && let Ok(d) = String::from_utf8(d)
                                {
                                    out.push(d);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    if let Some(v) = values {
        strings(v, &mut out);
    }
    for f in values_files {
        if let Some(body) = text(f)
            && let Ok(docs) = serde_saphyr::from_multiple::<Value>(body)
        {
            for d in &docs {
                strings(d, &mut out);
            }
        }
    }
    out.retain(|s| s.chars().count() >= MIN_LEN);
    // Longest first, so that a value is hidden whole before a part of it is.
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out.dedup();
    out
}

/// Every string in `v`.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(m) => m.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

/// `message` with each of `hidden` replaced by `(hidden)`.
pub(super) fn hide(message: &str, hidden: &[String]) -> String {
    let mut out = message.to_string();
    for h in hidden {
        if out.contains(h.as_str()) {
            out = out.replace(h.as_str(), "(hidden)");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(list: &[(&str, &str)]) -> Files {
        Files {
            files: list
                .iter()
                .map(|(p, c)| (p.to_string(), c.as_bytes().to_vec()))
                .collect(),
            ..Files::default()
        }
    }

    #[test]
    fn secret_generator_inputs_secret_data_and_helm_values_are_hidden() {
        let f = files(&[
            (
                "app/kustomization.yaml",
                "secretGenerator:\n- name: s\n  literals: [\"SUPERSECRET-LITERAL-1234\", \"user=admin-name\"]\n  files: [key=tls.key]\n  envs: [db.env]\n",
            ),
            ("app/tls.key", "-----BEGIN KEY----- abcdef\n"),
            ("app/db.env", "PASSWORD=hunter2-db\n"),
            (
                "app/secret.yaml",
                "apiVersion: v1\nkind: Secret\nmetadata: {name: x}\ndata: {k: aHVudGVyMi1iNjQ=}\nstringData: {p: plain-secret}\n",
            ),
            ("values/prod.yaml", "db:\n  password: values-file-pw\n"),
            (
                "app/other.yaml",
                "kind: ConfigMap\ndata: {k: visible-value}\n",
            ),
        ]);
        let inline = serde_json::json!({"password": "SUPERSECRET-SCHEMA-Pw1", "n": 1, "x": "ab"});
        let hidden = sensitive(&f, Some(&inline), &["values/prod.yaml".to_string()]);
        let message = "invalid literal source SUPERSECRET-LITERAL-1234; admin-name; -----BEGIN KEY----- abcdef; hunter2-db; hunter2-b64; plain-secret; values-file-pw; at '/password': 'SUPERSECRET-SCHEMA-Pw1' does not match; visible-value; ab";
        let shown = hide(message, &hidden);
        for secret in [
            "SUPERSECRET-LITERAL-1234",
            "admin-name",
            "BEGIN KEY",
            "hunter2-db",
            "hunter2-b64",
            "plain-secret",
            "values-file-pw",
            "SUPERSECRET-SCHEMA-Pw1",
        ] {
            assert!(!shown.contains(secret), "{secret}: {shown}");
        }
        assert!(
            shown.contains("visible-value") && shown.ends_with("; ab"),
            "{shown}"
        );
    }
}
