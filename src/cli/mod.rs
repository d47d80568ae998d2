//! The command line (ARCHITECTURE.md section 7): `run`, `sync`, `diff`, `status`, `validate` and
//! `store list|get|put|delete`, with the exit statuses the design gives.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::Value;
use tracing::Instrument;

use crate::config::{self, Loaded};
use crate::diff;
use crate::health;
use crate::manifest::{self, Diagnostic};
use crate::metrics::Metrics;
use crate::object::{self, Object, ObjectKey};
use crate::reconcile::{Agent, App, Previews, Trigger};
use crate::render::Renderer;
use crate::report;
use crate::server::{self, AppRoute, ServerState, WebhookSecrets};
use crate::source::{self, GitCache};
use crate::status::{self, ConditionStatus, ConditionType, Reason, SyncStatus};
use crate::store::{Precondition, Selector, Store, Write, sqlite::SqliteStore};
use secrecy::SecretString;

/// `print!` to standard output that ends the process quietly (exit status 141, as a filter
/// killed by SIGPIPE) when the reader has gone away (`driftless store list | head`); SIGPIPE
/// itself stays ignored, so that a peer closing a socket (an API server restarting) never
/// kills the agent.
macro_rules! out {
    ($($t:tt)*) => { $crate::cli::write_out(format_args!($($t)*)) };
}

/// [`out!`] with a newline.
macro_rules! outln {
    () => { $crate::cli::write_out(format_args!("\n")) };
    ($($t:tt)*) => { $crate::cli::write_out(format_args!("{}\n", format_args!($($t)*))) };
}

/// Writes to standard output; a closed pipe ends the process quietly with status 141 (what a
/// shell reports for a filter SIGPIPE killed), any other failure is ignored as `print!` would
/// panic on it.
fn write_out(args: std::fmt::Arguments) {
    if let Err(e) = std::io::stdout().lock().write_fmt(args)
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        std::process::exit(141);
    }
}

mod open;
mod run;
mod show;
mod store;
mod sync;
mod validate;

#[cfg(feature = "etcd")]
pub use open::open_etcd;
pub use open::open_store;
use open::*;
use run::*;
use show::*;
use store::*;
use sync::*;
use validate::*;

/// driftless: a GitOps sync agent. Applies declarations from Git to a store, reverts drift,
/// and reports what is true.
#[derive(Debug, Parser)]
#[command(name = "driftless", version, about)]
pub struct Cli {
    /// Config file.
    #[arg(short, long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Log format on standard error: `text` for people, `json` for machines.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Log formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Output formats of `status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StatusFormat {
    /// A table; `status` cuts long messages to [`MESSAGE_WIDTH`] characters.
    Table,
    /// A table with whole messages, as kubectl's `-o wide`.
    Wide,
    /// The JSON of ARCHITECTURE.md section 7.
    Json,
}

/// How many characters of a message the `status` table shows (`-o wide` shows all).
pub const MESSAGE_WIDTH: usize = 80;

/// `text` cut to `width` characters, ending in `…` when cut.
fn truncated(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_string()
    } else {
        let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// Output formats of `store`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ObjectFormat {
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the agent: reconcile every app until SIGTERM or SIGINT.
    Run,
    /// One reconcile pass of each app, then exit: 0 when every app is Synced, 1 otherwise.
    Sync {
        /// Only this app.
        #[arg(long)]
        app: Option<String>,
        /// Plan and print; write nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// What a sync would change: exit 0 no changes, 1 changes, 2 error. With `--desired` and
    /// `--live`, compares declared and live objects offline instead, matched by key.
    Diff {
        /// Only this app.
        #[arg(long, conflicts_with_all = ["desired", "live"])]
        app: Option<String>,
        /// Compare this revision (commit, branch or tag) instead of the configured ref.
        #[arg(long, conflicts_with_all = ["desired", "live"])]
        revision: Option<String>,
        /// Offline: the declared objects (a YAML or JSON file; `-` for standard input).
        #[arg(long, requires = "live")]
        desired: Option<PathBuf>,
        /// Offline: the live objects, as the store or a cluster has them. Each one's
        /// `kubectl.kubernetes.io/last-applied-configuration` annotation, when present, is the
        /// last-applied copy of the three-way diff.
        #[arg(long, requires = "desired")]
        live: Option<PathBuf>,
    },
    /// The health (and why) of each object in a file, with the config's custom rules: for
    /// testing health rules. Exit 0, or 2 when the file cannot be read.
    Health {
        /// A YAML or JSON file of live objects (`-` for standard input).
        #[arg(short, long)]
        file: PathBuf,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = StatusFormat::Table)]
        output: StatusFormat,
    },
    /// Waits until an app is synced and healthy (or what `--for` says), for CI pipelines:
    /// exit 0 as soon as it is, 1 at the timeout saying why not.
    Wait {
        /// The app.
        #[arg(long)]
        app: String,
        /// Conditions, comma-separated: `synced`, `healthy`.
        #[arg(long = "for", value_delimiter = ',', default_value = "synced,healthy")]
        conditions: Vec<String>,
        /// Also require this revision in force: a commit id or its prefix, or a name resolved in
        /// the app's repository as `git rev-parse` takes it (`main`, a tag, `HEAD~1`).
        #[arg(long)]
        revision: Option<String>,
        /// How long to wait, e.g. `90s`, `5m`.
        #[arg(long, default_value = "5m", value_parser = bounded_duration)]
        timeout: std::time::Duration,
    },
    /// The status the agent recorded in the store.
    Status {
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = StatusFormat::Table)]
        output: StatusFormat,
    },
    /// Parse manifest files or folders; print `path:line:col: severity: message`. Exit 0 when
    /// there are no errors, 1 otherwise.
    Validate {
        /// Files or folders.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Print driftless's version and the renderers it runs (`kustomize`, `helm`): where each
    /// is found (the config's `renderers:`, else the PATH) and the version it reports. Exit 0.
    Version,
    /// Read and write the store directly, as a person or another controller would.
    Store {
        /// The store command.
        #[command(subcommand)]
        command: StoreCommand,
    },
}

/// `driftless store ...`.
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// List live objects, optionally of some kinds: `KIND[.GROUP]`, or several joined by commas
    /// as kubectl takes them (`svc,cm`).
    List {
        /// `KIND` or `KIND.GROUP` (kind case-insensitive, e.g. `deployment.apps`), or a
        /// comma-separated list of them.
        kind: Option<String>,
        /// Only this namespace.
        #[arg(short, long, conflicts_with = "all_namespaces")]
        namespace: Option<String>,
        /// Every namespace (the default without `-n`), as kubectl's `-A`.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// Output format (default: a table).
        #[arg(short, long, value_enum)]
        output: Option<ObjectFormat>,
    },
    /// Print one live object: exit 0, or 1 when not found.
    Get {
        /// `KIND` or `KIND.GROUP`, or `KIND[.GROUP]/NAME` as kubectl takes it (then no NAME).
        kind: String,
        /// Name.
        name: Option<String>,
        /// Namespace (default: `default`, then cluster-scoped). Ignored for a cluster-scoped
        /// object, as kubectl ignores it.
        #[arg(short, long)]
        namespace: Option<String>,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = ObjectFormat::Yaml)]
        output: ObjectFormat,
    },
    /// Write each object in FILE as given (`-` for standard input); on Kubernetes as field
    /// manager `driftless-cli`, so the agent sees it as drift and names who made it.
    Put {
        /// A YAML or JSON file of one or more objects.
        #[arg(short, long)]
        file: PathBuf,
        /// Namespace for namespaced objects that declare none (default `default`).
        #[arg(short, long)]
        namespace: Option<String>,
    },
    /// Delete a live object: exit 0, or 1 when not found.
    Delete {
        /// `KIND` or `KIND.GROUP`, or `KIND[.GROUP]/NAME` as kubectl takes it (then no NAME).
        kind: String,
        /// Name.
        name: Option<String>,
        /// Namespace (default: `default`, then cluster-scoped). Ignored for a cluster-scoped
        /// object, as kubectl ignores it.
        #[arg(short, long)]
        namespace: Option<String>,
    },
}

/// glibc's malloc gives each thread that contends for it an arena of its own, up to 8 per
/// core, and memory freed in one arena is not reused by another: the agent's worker threads,
/// the parsing threads and the page handlers each kept their own high-water mark. Two arenas
/// (glibc's `M_ARENA_MAX`, as the `MALLOC_ARENA_MAX` variable sets it, which is left to win when
/// set) took the agent serving 30 page readers during drift from 144 to 127 MiB at 10,000
/// objects (a cold `driftless sync` from 215 to 210 MiB; no change in time).
///
/// An agent of fewer than [`ONE_ARENA_BELOW_APPS`] apps (`arenas` 1) has one arena: memory a
/// thread frees is then reused by every other, where with two the start-up sync of a large app
/// left one arena's freed memory resident while the other's threads allocated (etcd, one app of
/// 10,000 objects, serving 30 page readers: 99 to 105 MiB resident at its peak with two, 76 to
/// 78 with one; its heap peaked at 44 MB, `heaptrack`). Many apps keep two: their syncs
/// contend for one arena's lock (1,000 apps of ten objects took 41.5 s instead of 29.2 s to
/// sync after start, and a webhook's commit was applied after 1.1 s instead of 0.34). One
/// arena costs a large app's parse, whose two threads then contend for its lock: the agent's
/// first sync of 10,000 objects took 451 ms instead of 288 (same peak).
///
/// Blocks of 256 KiB or more are mapped on their own and unmapped when freed (glibc's
/// `M_MMAP_THRESHOLD`, as `MALLOC_MMAP_THRESHOLD_` sets it, left to win when set). glibc's
/// default starts at 128 KiB but rises with every large block freed, up to 32 MiB, after which
/// the record texts and batches of a large sync (megabytes each) come from the arenas and leave
/// holes there that the parsed objects around them keep from being returned. Fixed, a cold
/// sync of 100,000 objects peaked at 610 MiB instead of 640 to 645, the running agent at
/// 10,000 objects at 91 instead of 98 MiB (`--only drift`), a cold sync of 10,000 at 82 instead
/// of 86 MiB.
///
/// A command that runs once and exits (`one_shot`: every command but `run`) also grows and
/// trims its heap in steps of [`ONE_SHOT_TOP_PAD`] (glibc's `M_TOP_PAD`, as `MALLOC_TOP_PAD_`
/// sets it, left to win when set). glibc's default of 128 KiB grows a thread's arena one page
/// at a time, an `mprotect` call each: a cold sync of 10,000 objects made 3,035 of them (and
/// 334 `brk`), 40 with the pad, and took 9.6 ms less (paired median of 15 cold syncs, 16.5 ms
/// less CPU); its peak rose from 77 to 84 MiB, that of 100,000 objects from 553 to 572 MiB (the
/// pad is kept when the heap is trimmed). The agent keeps the default: it lives on, and gives
/// back what a large pass freed.
fn tune_malloc(arenas: i32, one_shot: bool) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only sets a malloc tunable; called before any thread is started
        // (glibc fixes the arena limit when a second thread first allocates).
        if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
            unsafe {
                libc::mallopt(libc::M_ARENA_MAX, arenas);
            }
        }
        if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
            }
        }
        if one_shot && std::env::var_os("MALLOC_TOP_PAD_").is_none() {
            unsafe {
                libc::mallopt(libc::M_TOP_PAD, ONE_SHOT_TOP_PAD);
            }
        }
    }
}

/// Parses the command line, runs the command and returns its exit status. Errors print their
/// chain to standard error and exit 2.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // The agent's config is read before any thread starts: the number of its apps sets the
    // allocator's arenas, which glibc fixes when a second thread first allocates.
    let agent_config =
        matches!(cli.command, Command::Run).then(|| load_config(cli.config.as_deref(), true));
    tune_malloc(
        malloc_arenas(agent_config.as_ref()),
        !matches!(cli.command, Command::Run),
    );
    // One TLS stack for HTTP clients: rustls with ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // SIGPIPE stays ignored (Rust's default): a peer that closes a socket must never kill the
    // agent. A closed standard output ends the commands quietly instead ([`write_out`]).
    // libgit2's settings and OpenSSL's CA bundle, read beside the config and the store.
    if std::thread::Builder::new()
        .name("git-init".into())
        .spawn(|| {
            let _span = tracing::debug_span!("git_init").entered();
            crate::source::git_ready();
        })
        .is_err()
    {
        crate::source::git_ready();
    }
    init_logging(&cli);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("driftless")
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(async {
        let result = run_command(cli, agent_config).await;
        open::settle_opened().await;
        result
    });
    // Do not wait for blocking tasks still running (a fetch from a silent server).
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// How far a one-shot command's heap grows at a time, and what it keeps when trimmed: 32 MiB
/// (see [`tune_malloc`]).
const ONE_SHOT_TOP_PAD: i32 = 32 << 20;

/// Apps from which the agent keeps two malloc arenas rather than one (see [`tune_malloc`]).
pub const ONE_ARENA_BELOW_APPS: usize = 100;

/// The malloc arenas for this process: one for an agent (`agent`: its config as read) of fewer
/// than [`ONE_ARENA_BELOW_APPS`] apps, two for every other command and a larger agent.
fn malloc_arenas(agent: Option<&anyhow::Result<Loaded>>) -> i32 {
    match agent {
        Some(Ok(cfg)) if cfg.config.apps.len() < ONE_ARENA_BELOW_APPS => 1,
        _ => 2,
    }
}

fn init_logging(cli: &Cli) {
    let default = if matches!(cli.command, Command::Run) {
        "info"
    } else {
        "warn"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

const DEFAULT_CONFIG: &str = "driftless.yaml";

/// Loads the config. With `required`, the file must exist; otherwise a missing default file
/// means the defaults (the SQLite store at `.driftless/store.db`, no apps).
fn load_config(path: Option<&Path>, required: bool) -> anyhow::Result<Loaded> {
    match path {
        Some(p) => Ok(config::load(p)?),
        None => {
            let p = Path::new(DEFAULT_CONFIG);
            if p.exists() {
                Ok(config::load(p)?)
            } else if required {
                bail!("no config: pass -c FILE or create {DEFAULT_CONFIG} in this folder")
            } else {
                Ok(config::parse(p, "{}")?)
            }
        }
    }
}

/// Runs `cli`'s command; `agent_config`: the agent's config as `main` read it before starting
/// any thread (read here when `None`).
async fn run_command(cli: Cli, agent_config: Option<anyhow::Result<Loaded>>) -> anyhow::Result<u8> {
    let config = cli.config.as_deref();
    match cli.command {
        Command::Run => run(agent_config.unwrap_or_else(|| load_config(config, true))?).await,
        Command::Sync { app, dry_run } => sync(load_config(config, true)?, app, dry_run).await,
        Command::Diff {
            desired: Some(desired),
            live: Some(live),
            ..
        } => Ok(diff_offline(&desired, &live)),
        Command::Diff { app, revision, .. } => {
            diff_cmd(load_config(config, true)?, app, revision).await
        }
        Command::Health { file, output } => health_cmd(load_config(config, false)?, &file, output),
        Command::Wait {
            app,
            conditions,
            revision,
            timeout,
        } => {
            wait_cmd(
                load_config(config, false)?,
                &app,
                &conditions,
                revision.as_deref(),
                timeout,
            )
            .await
        }
        Command::Status { output } => status_cmd(load_config(config, true)?, output).await,
        Command::Validate { paths } => Ok(validate(&load_config(config, false)?, &paths).await),
        Command::Store { command } => store_cmd(load_config(config, false)?, command).await,
        Command::Version => version_cmd(&load_config(config, false)?).await,
    }
}

fn selected_apps(cfg: &Loaded, app: Option<&str>) -> anyhow::Result<Vec<config::AppConfig>> {
    match app {
        Some(name) => match cfg.app(name) {
            Some(a) => Ok(vec![a.clone()]),
            None => bail!("no app named `{name}` in {}", cfg.path.display()),
        },
        None => Ok(cfg.config.apps.clone()),
    }
}

/// A duration on the command line (`30s`, `5m`, `2h`), at most [`crate::config::MAX_DURATION`]
/// (100 years), as in the config file.
fn bounded_duration(s: &str) -> Result<std::time::Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d > crate::config::MAX_DURATION {
        return Err("longer than 100 years".into());
    }
    Ok(d)
}

/// Prints rows as aligned columns. Control characters in a cell (a newline that would forge a
/// row, a terminal escape) are shown escaped (`\n`, `\u{1b}`), never raw.
fn print_table<R: AsRef<[String]>>(rows: &[R]) {
    let n = rows.first().map_or(0, |r| r.as_ref().len());
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.as_ref().iter().map(|c| object::printable(c)).collect())
        .collect();
    let mut widths = vec![0usize; n];
    for r in &rows {
        for (i, c) in r.iter().enumerate().take(n) {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = std::io::stdout().lock();
    for r in &rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate().take(n) {
            if i + 1 == n {
                line.push_str(c);
            } else {
                line.push_str(&format!("{c:<w$}   ", w = widths[i]));
            }
        }
        if let Err(e) = writeln!(out, "{}", line.trim_end())
            && e.kind() == std::io::ErrorKind::BrokenPipe
        {
            std::process::exit(141);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_cells_never_carry_raw_control_characters() {
        assert_eq!(object::printable("plain"), "plain");
        assert_eq!(
            object::printable("evil\nconfigmap  forged\u{1b}[2J\0"),
            "evil\\nconfigmap  forged\\u{1b}[2J\\u{0}"
        );
    }

    fn agent_of(apps: usize) -> anyhow::Result<Loaded> {
        let mut text = String::from("apps:\n");
        for i in 0..apps {
            text.push_str(&format!(
                "  - {{name: a{i}, source: {{repo: /r, path: p}}, target: {{namespace: n}}}}\n"
            ));
        }
        Ok(config::parse(Path::new("driftless.yaml"), &text)?)
    }

    #[test]
    fn an_agent_of_few_apps_has_one_malloc_arena_and_everything_else_two() {
        assert_eq!(malloc_arenas(Some(&agent_of(1))), 1);
        assert_eq!(malloc_arenas(Some(&agent_of(ONE_ARENA_BELOW_APPS - 1))), 1);
        assert_eq!(malloc_arenas(Some(&agent_of(ONE_ARENA_BELOW_APPS))), 2);
        assert_eq!(malloc_arenas(Some(&agent_of(1000))), 2);
        // Other commands, and an agent whose config does not load (it fails at once).
        assert_eq!(malloc_arenas(None), 2);
        assert_eq!(malloc_arenas(Some(&Err(anyhow::anyhow!("no config")))), 2);
    }
}
