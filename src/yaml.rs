//! serde-saphyr glue shared by the manifest parser and the config loader: where an error is
//! and what it says, without the parser's own decorations.

/// The position (1-based line and column) and message of a serde-saphyr error. The message has
/// neither the `line N column M:` prefix nor the `at line N, column M` suffix the library adds
/// (callers print the position themselves), nor its hint about library options; a duplicate key
/// reads ``duplicate key `name` ``. An error without a position is placed at 1:1.
pub fn error_parts(e: &serde_saphyr::Error) -> (u64, u64, String) {
    let (line, column) = e
        .location()
        .map_or((1, 1), |l| (l.line().max(1), l.column().max(1)));
    (line, column, message(&e.to_string()))
}

/// Line and column (1-based; the column counts characters) of the position just after
/// `prefix`, for byte offsets found outside the parser (invalid UTF-8).
pub fn line_column(prefix: &[u8]) -> (u64, u64) {
    let line = prefix.iter().filter(|&&b| b == b'\n').count() as u64 + 1;
    let last = prefix
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(prefix, |i| &prefix[i + 1..]);
    let column = String::from_utf8_lossy(last).chars().count() as u64 + 1;
    (line, column)
}

fn message(raw: &str) -> String {
    let mut msg = raw.trim();
    msg = msg.strip_prefix("error: ").unwrap_or(msg);
    if let Some(rest) = msg.strip_prefix("line ")
        && let Some(idx) = rest.find(": ")
        && rest[..idx].contains("column")
    {
        msg = &rest[idx + 2..];
    }
    let msg = msg.lines().next().unwrap_or(msg);
    let msg = msg
        .split(", set DuplicateKeyPolicy")
        .next()
        .unwrap_or(msg)
        .trim();
    let msg = match msg.rfind(" at line ") {
        Some(i) if msg[i..].contains(", column ") => msg[..i].trim_end(),
        _ => msg,
    };
    // Hints about the library's own options mean nothing to a user.
    let msg = match msg.find(" set ").or_else(|| msg.find(", set ")) {
        Some(i) if msg[i..].contains("Options") => msg[..i].trim_end_matches([',', '.', ' ']),
        _ => msg,
    };
    if let Some(key) = msg.strip_prefix("duplicate mapping key: ") {
        return format!("duplicate key `{key}`");
    }
    if let Some(rest) = msg.strip_prefix("budget breached: ") {
        let what = rest.split([' ', '{']).next().unwrap_or(rest);
        return match what {
            "Depth" => "nested deeper than the parser allows (127 levels)".into(),
            "Aliases" | "Anchors" | "AliasAnchorRatio" => {
                "too many aliases or anchors (an alias bomb?)".into()
            }
            "Documents" => "too many documents in one file".into(),
            other => format!("the file is too large to read safely ({other} limit)"),
        };
    }
    if msg.starts_with("!!binary scalar is not valid UTF-8") {
        return "a `!!binary` value must decode to UTF-8 text here".into();
    }
    if msg.starts_with("alias replay limit exceeded") {
        return "aliases expand to too much data (an alias bomb?)".into();
    }
    if let Some(rest) = msg.strip_prefix("non-finite float ") {
        let value = rest.split(" rejected").next().unwrap_or(rest);
        return format!("number {value} is out of range");
    }
    if msg.starts_with("cannot deserialize null into string") {
        return "expected a string, found null".into();
    }
    if msg.starts_with("unsupported tag") {
        return format!("{msg}: Kubernetes manifests use no custom tags");
    }
    msg.to_string()
}

/// The longest duration the config takes: 100 years. Longer ones overflow time arithmetic
/// (`now + 300000y` is past the last representable date; tokio's timers and chrono's dates
/// panic or give up), and none is meaningful.
pub const MAX_DURATION: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 24 * 3600);

/// Deserializes a humantime duration (`30s`, `10m`, `1h`) with its position, at most
/// [`MAX_DURATION`]; the config's duration fields use it.
///
/// # Errors
///
/// A message naming the text when it is not a duration or is too long.
pub fn duration<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<serde_saphyr::Spanned<std::time::Duration>, D::Error> {
    use serde::Deserialize as _;
    let s = serde_saphyr::Spanned::<String>::deserialize(d)?;
    let value = humantime::parse_duration(s.value.trim()).map_err(|e| {
        serde::de::Error::custom(format!(
            "invalid duration `{}`: {e} (write e.g. `30s`, `10m`, `1h`)",
            s.value
        ))
    })?;
    if value > MAX_DURATION {
        return Err(serde::de::Error::custom(format!(
            "duration `{}` is longer than 100 years, the longest this setting takes",
            s.value.trim()
        )));
    }
    Ok(serde_saphyr::Spanned::new(value, s.referenced, s.defined))
}

/// A value with no position in the file (a default the file did not write).
pub fn unspanned<T>(value: T) -> serde_saphyr::Spanned<T> {
    serde_saphyr::Spanned::new(
        value,
        serde_saphyr::Location::UNKNOWN,
        serde_saphyr::Location::UNKNOWN,
    )
}

/// Deserializes an optional humantime duration.
///
/// # Errors
///
/// As [`duration`].
pub fn opt_duration<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<serde_saphyr::Spanned<std::time::Duration>>, D::Error> {
    duration(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_lose_the_positions_and_hints_the_library_adds() {
        assert_eq!(
            message(
                "error: line 3 column 1: duplicate mapping key: a, set DuplicateKeyPolicy in Options if acceptable\n --> <input>:3:1"
            ),
            "duplicate key `a`"
        );
        assert_eq!(
            message("unknown field `branch`, expected one of repo, ref at line 5, column 7"),
            "unknown field `branch`, expected one of repo, ref"
        );
        assert_eq!(message("unclosed quote"), "unclosed quote");
        assert_eq!(
            message("budget breached: Depth { depth: 128 }"),
            "nested deeper than the parser allows (127 levels)"
        );
        assert_eq!(
            message("non-finite float `1e400` rejected by the configured policy"),
            "number `1e400` is out of range"
        );
        assert_eq!(
            message(
                "!!binary scalar is not valid UTF-8 so cannot be stored into string. If you just use !!binary for documentation/annotation, set ignore_binary_tag_for_string in Options"
            ),
            "a `!!binary` value must decode to UTF-8 text here"
        );
        assert_eq!(
            message("cannot deserialize null into string; use Option<String>"),
            "expected a string, found null"
        );
    }
}
