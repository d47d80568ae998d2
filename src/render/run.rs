//! Running a renderer (`kustomize`, `helm`) as a child process: in its own process group, with
//! a cleared environment that points every home, cache and temporary folder into the private
//! copy and leaves no `PATH` (no `git` for kustomize to fetch a remote base with, no helm
//! plugins) and a proxy that refuses any connection, bounded in time and output. A run past its
//! time or output limit is killed with its whole process group (a script's `sleep` included).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

/// How much of a renderer's standard error is kept: the message, not a flood.
const MAX_STDERR: usize = 64 << 10;

/// Characters of standard error kept in an error message.
const MESSAGE_CHARS: usize = 1500;

/// What a run gave.
#[derive(Debug)]
pub(super) struct Output {
    /// Standard output, at most the limit.
    pub stdout: Vec<u8>,
    /// Standard error, trimmed ([`trim_stderr`]).
    pub stderr: String,
}

/// Why a run gave nothing usable.
#[derive(Debug)]
pub(super) enum Failure {
    /// The binary is not there (or not executable).
    Missing(std::io::Error),
    /// It could not be started for another reason.
    Spawn(std::io::Error),
    /// It exited unsuccessfully; its trimmed standard error.
    Exited(String),
    /// It ran past the time limit and was killed.
    TimedOut,
    /// It printed more than the limit and was killed.
    TooLarge,
}

/// The binary named `name` (`kustomize`, `helm`): `configured` when given, else the first
/// executable `name` on this process's `PATH`. `None` when there is none.
pub(super) fn locate(configured: Option<&Path>, name: &str) -> Result<PathBuf, String> {
    if let Some(p) = configured {
        return Ok(p.to_path_buf());
    }
    use std::os::unix::fs::PermissionsExt;
    for dir in std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
    {
        let p = dir.join(name);
        if std::fs::metadata(&p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0) {
            return Ok(p);
        }
    }
    Err(format!(
        "no `{name}` on the PATH; install it or set `renderers.{name}` in the config"
    ))
}

/// The environment of a renderer run in the private folder `private`.
fn environment(private: &Path) -> Vec<(&'static str, OsString)> {
    let home = private.join(".home");
    let at = |p: &str| home.join(p).into_os_string();
    vec![
        ("HOME", home.clone().into_os_string()),
        ("TMPDIR", at("tmp")),
        ("XDG_CONFIG_HOME", at("config")),
        ("XDG_CACHE_HOME", at("cache")),
        ("XDG_DATA_HOME", at("data")),
        ("HELM_CONFIG_HOME", at("helm/config")),
        ("HELM_CACHE_HOME", at("helm/cache")),
        ("HELM_DATA_HOME", at("helm/data")),
        ("HELM_PLUGINS", at("helm/plugins")),
        ("KUSTOMIZE_PLUGIN_HOME", at("kustomize/plugin")),
        ("KUBECONFIG", at("no-kubeconfig")),
        // No program to run (kustomize runs `git` for a remote base).
        ("PATH", OsString::new()),
        // Go honours these: any connection that is not to loopback goes to a port where
        // nothing listens. The walk has already refused every remote reference.
        ("HTTP_PROXY", "http://127.0.0.1:9".into()),
        ("HTTPS_PROXY", "http://127.0.0.1:9".into()),
        ("http_proxy", "http://127.0.0.1:9".into()),
        ("https_proxy", "http://127.0.0.1:9".into()),
        ("NO_PROXY", OsString::new()),
        ("GIT_TERMINAL_PROMPT", "0".into()),
        ("LANG", "C".into()),
    ]
}

/// Runs `program args` in `cwd` (inside `private`), for at most `limit`, keeping at most
/// `max_stdout` bytes of output.
pub(super) async fn run(
    program: &Path,
    args: &[OsString],
    cwd: &Path,
    private: &Path,
    limit: Duration,
    max_stdout: u64,
) -> Result<Output, Failure> {
    for dir in ["tmp", "config", "cache", "data"] {
        let _ = std::fs::create_dir_all(private.join(".home").join(dir));
    }
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(environment(private))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    let mut child = cmd.spawn().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied => Failure::Missing(e),
        _ => Failure::Spawn(e),
    })?;
    let group = child.id().map(|pid| pid as i32);
    let kill_group = move || {
        if let Some(pgid) = group {
            // SAFETY: a plain signal to the process group this run created. Its id is the
            // leader's pid, which Linux does not give to a new process while the group has a
            // member (or the unreaped leader); with none left, the call fails with ESRCH.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    };
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let reading = async {
        let out = read_limited(stdout, max_stdout, Some(&kill_group));
        // Past its cap, standard error is read and dropped: a renderer whose pipe closed would
        // die of SIGPIPE over its warnings.
        let err = read_limited(stderr, MAX_STDERR as u64, None);
        tokio::join!(out, err)
    };
    let (out, err) = match tokio::time::timeout(limit, reading).await {
        Ok(r) => r,
        Err(_) => {
            kill_group();
            let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
            return Err(Failure::TimedOut);
        }
    };
    // Whatever the leader left behind in its group goes with it.
    let status = match tokio::time::timeout(Duration::from_secs(5), child.wait()).await {
        Ok(Ok(s)) => Some(s),
        _ => None,
    };
    kill_group();
    let (stdout, too_large) = out;
    if too_large {
        return Err(Failure::TooLarge);
    }
    let stderr = trim_stderr(&String::from_utf8_lossy(&err.0), private);
    match status {
        Some(s) if s.success() => Ok(Output { stdout, stderr }),
        Some(s) => Err(Failure::Exited(if stderr.is_empty() {
            format!("exited with {s} and no message")
        } else {
            stderr
        })),
        None => Err(Failure::Exited(
            "did not exit after closing its output".into(),
        )),
    }
}

/// Reads `from` to its end, keeping at most `max` bytes. Past them, with `on_exceed`, it calls
/// it (which kills the run) and returns what it has with `true`; without, it goes on reading
/// to the end and drops the rest.
async fn read_limited<R: AsyncRead + Unpin>(
    from: Option<R>,
    max: u64,
    on_exceed: Option<&(dyn Fn() + Sync)>,
) -> (Vec<u8>, bool) {
    let Some(mut from) = from else {
        return (Vec::new(), false);
    };
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return (out, false),
            Ok(n) => {
                let room = max.saturating_sub(out.len() as u64) as usize;
                if n > room {
                    if let Some(kill) = on_exceed {
                        kill();
                        return (out, true);
                    }
                    out.extend_from_slice(&buf[..room]);
                } else {
                    out.extend_from_slice(&buf[..n]);
                }
            }
        }
    }
}

/// A renderer's standard error fit for a condition message: paths of the private copy shown
/// as repository paths, terminal escapes removed, from its last `Error:` on (helm and kustomize
/// print warnings first), on one line, at most [`MESSAGE_CHARS`] characters.
pub(super) fn trim_stderr(stderr: &str, private: &Path) -> String {
    let private = private.display().to_string();
    let mut text = stderr
        .replace(&format!("{private}/"), "")
        .replace(&private, ".");
    // ANSI escape sequences (`ESC [ ... letter`).
    while let Some(i) = text.find('\u{1b}') {
        let end = text[i + 1..]
            .find(|c: char| c.is_ascii_alphabetic())
            .map_or(text.len(), |j| i + 1 + j + 1);
        text.replace_range(i..end, "");
    }
    let from = text.rfind("Error:").unwrap_or(0);
    let one_line: String = text[from..]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let one_line = one_line.trim_start_matches("Error:").trim().to_string();
    if one_line.chars().count() > MESSAGE_CHARS {
        let mut cut: String = one_line.chars().take(MESSAGE_CHARS - 1).collect();
        cut.push('…');
        cut
    } else {
        one_line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_renderer_loud_on_standard_error_is_not_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        // 1 MiB of warnings, then the output: closing standard error early would kill it.
        let script = dir.path().join("loud.sh");
        std::fs::write(
            &script,
            "#!/bin/sh\nset -e\n/usr/bin/head -c 1048576 /dev/zero | /usr/bin/tr '\\0' w >&2\necho 'kind: ok'\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = run(
            &script,
            &[],
            dir.path(),
            dir.path(),
            Duration::from_secs(20),
            1 << 20,
        )
        .await
        .unwrap();
        assert_eq!(out.stdout, b"kind: ok\n");
        // Past the stdout limit it is killed.
        let r = run(
            &script,
            &[],
            dir.path(),
            dir.path(),
            Duration::from_secs(20),
            3,
        )
        .await;
        assert!(matches!(r, Err(Failure::TooLarge)), "{r:?}");
    }

    #[test]
    fn stderr_is_trimmed_to_the_error_with_repository_paths() {
        let private = Path::new("/cache/render/render-abc");
        let got = trim_stderr(
            "W1202 warning: something\n\u{1b}[31mError: accumulating resources from '../base': '/cache/render/render-abc/apps/base' must resolve\u{1b}[0m\n  to a file\n",
            private,
        );
        assert_eq!(
            got,
            "accumulating resources from '../base': 'apps/base' must resolve to a file"
        );
        let long = "x ".repeat(5000);
        assert_eq!(trim_stderr(&long, private).chars().count(), MESSAGE_CHARS);
    }
}
