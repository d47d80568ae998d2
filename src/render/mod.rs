//! The render stage: an app's files at one revision become its desired set, with every
//! diagnostic. One place, used by the agent, the previews and every CLI command
//! (ARCHITECTURE.md section 5, "Rendering").
//!
//! ```text
//! source (Git tree) → prepare (what to render, and its key) → render (files → desired set) → plan
//! ```
//!
//! An app's path is read in one of three ways ([`Renderer`]):
//!
//! - **plain manifests**: `*.yaml`, `*.yml`, `*.json` parsed by [`crate::manifest`]'s rules.
//!   A folder under the path that holds a kustomization file is not read file by file: it is
//!   built with `kustomize build` and its output joins the set (as Flux builds such a path). A
//!   kustomization file at the path itself makes the whole app a Kustomize overlay; a
//!   `Chart.yaml` there makes it a Helm chart.
//! - **Kustomize** (`source.kustomize`, or automatic as above): the references of each overlay
//!   are walked on Git objects first ([`kustomize::walk`]); any that leaves the repository or
//!   names something remote refuses the revision before kustomize runs.
//! - **Helm** (`source.helm`): `helm template` of the chart at the path, or of a chart fetched
//!   from a chart repository in the source stage ([`Render::resolve_chart`]).
//!
//! The renderers are the real binaries, run over a private copy of what they can reach, written
//! out from Git objects (no checkout; symlinks by the section 5 rules), offline, bounded in
//! time and output (`run.rs`). Their output is read as kubectl reads YAML
//! ([`manifest::Mode::Rendered`]).
//!
//! Caching: [`Prepared::key`] covers everything a render depends on (the tree ids of the
//! folders and the blob ids of the files it reaches, its settings, the chart's digest), so a
//! caller that compares it with the key in force renders nothing for a no-op pass or a commit
//! elsewhere in the repository; [`Render`] itself keeps the newest output of each rendered
//! part by key, and the plain parse cache by (path, blob id).

mod disk;
mod helm;
pub mod kustomize;
mod redact;
mod run;

pub use disk::{Folder, FolderKind, render_folders};

pub use kustomize::Tree;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::config::AppConfig;
use crate::ignore::{self, IgnoreRule};
use crate::manifest::{self, DesiredSet, Diagnostic, FileResult};
use crate::object::Revision;
use crate::source::{self, Entry, Files, GitCache, HelmConfig, RenderTools, charts, hex};

/// Errors of the render stage.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the source failed (the app's path is not a folder, the cache failed).
    #[error(transparent)]
    Source(#[from] source::Error),
    /// The chart of `source.helm.chart` could not be fetched or is not the one pinned.
    #[error("chart {chart}")]
    ChartFailed {
        /// `<name> <version> from <repository>`.
        chart: String,
        /// What failed.
        #[source]
        source: Box<charts::Error>,
    },
    /// The renderer binary is not there.
    #[error("{renderer} is not installed: {looked}")]
    RendererMissing {
        /// `kustomize` or `helm`.
        renderer: &'static str,
        /// Where it was looked for.
        looked: String,
    },
    /// The renderer could not be started.
    #[error("cannot run `{command}`")]
    SpawnFailed {
        /// The command, with repository paths.
        command: String,
        /// The OS's error.
        #[source]
        source: std::io::Error,
    },
    /// The renderer exited unsuccessfully.
    #[error("`{command}` failed: {stderr}")]
    Failed {
        /// The command, with repository paths.
        command: String,
        /// Its standard error, trimmed.
        stderr: String,
    },
    /// The renderer ran past `source.renderTimeout` and was killed.
    #[error("`{command}` did not finish within {seconds} s (source.renderTimeout); killed")]
    TimedOut {
        /// The command.
        command: String,
        /// The limit, in seconds.
        seconds: u64,
    },
    /// The renderer printed more than `source.limits.maxBytes` and was killed.
    #[error("`{command}` printed more than {limit} bytes (source.limits.maxBytes); killed")]
    OutputTooLarge {
        /// The command.
        command: String,
        /// The limit, in bytes.
        limit: u64,
    },
    /// The private copy could not be written.
    #[error("cannot write the private copy of the repository to render from ({path})")]
    WriteFailed {
        /// The folder.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// True for a failure of the chart repository rather than of a renderer.
    pub fn is_chart(&self) -> bool {
        matches!(self, Error::ChartFailed { .. })
    }

    /// True when the chart repository changed a release pinned earlier.
    pub fn is_digest_change(&self) -> bool {
        matches!(self, Error::ChartFailed { source, .. } if matches!(**source, charts::Error::DigestChanged { .. }))
    }
}

/// Which renderer an app's config asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Renderer {
    /// Plain manifests, with any folder holding a kustomization file built by kustomize and a
    /// `Chart.yaml` at the path rendered by helm with the default settings.
    #[default]
    Auto,
    /// `source.kustomize`: the path must hold a kustomization file.
    Kustomize,
    /// `source.helm`: the chart at the path, or `source.helm.chart`.
    Helm,
}

impl Renderer {
    /// The renderer `cfg` asks for.
    pub fn for_app(cfg: &AppConfig) -> Self {
        if cfg.source.helm.is_some() {
            Renderer::Helm
        } else if cfg.source.kustomize.is_some() {
            Renderer::Kustomize
        } else {
            Renderer::Auto
        }
    }

    /// True when the plain reader takes the file at `path`: the Git walker and
    /// `driftless validate` read only these.
    pub fn wants(self, path: &str) -> bool {
        manifest::is_manifest_path(path)
    }
}

/// What the stage needs from the app's config.
#[derive(Clone, Debug)]
struct Settings {
    app: String,
    repo: String,
    path: String,
    limits: source::Limits,
    timeout: Duration,
    /// `source.timeout`: what a chart repository's requests may take.
    fetch_timeout: Duration,
    tools: RenderTools,
    helm: Option<HelmConfig>,
    target_namespace: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            app: String::new(),
            repo: String::new(),
            path: String::new(),
            limits: source::Limits::default(),
            timeout: Duration::from_secs(60),
            fetch_timeout: source::DEFAULT_FETCH_TIMEOUT,
            tools: RenderTools::default(),
            helm: None,
            target_namespace: "default".into(),
        }
    }
}

/// The chart a Helm part renders.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ChartSource {
    /// The chart folder at this repository path.
    Local(String),
    /// A chart fetched from a chart repository.
    Remote(charts::Chart),
}

/// One part of a desired set that a renderer builds.
#[derive(Clone, Debug)]
// An app has a few of these, built once per revision: their size does not matter.
#[allow(clippy::large_enum_variant)]
enum Unit {
    /// `kustomize build` of an overlay.
    Kustomize { root: String, walk: kustomize::Walk },
    /// `helm template` of a chart.
    Helm {
        chart: ChartSource,
        settings: HelmConfig,
        /// Values files as repository paths, in order.
        values_files: Vec<String>,
        /// What it reads from the repository, with object ids.
        reached: BTreeMap<String, String>,
    },
}

impl Unit {
    fn renderer(&self) -> &'static str {
        match self {
            Unit::Kustomize { .. } => "kustomize",
            Unit::Helm { .. } => "helm",
        }
    }

    /// The repository paths to write out for it; `[""]` (everything) when the walk was unsure.
    fn paths(&self) -> Vec<String> {
        match self {
            Unit::Kustomize { walk, .. } if walk.uncertain => vec![String::new()],
            Unit::Kustomize { walk, .. } => walk.reached.keys().cloned().collect(),
            Unit::Helm { reached, .. } => reached.keys().cloned().collect(),
        }
    }
}

/// What a revision renders from, read but not yet rendered: compare [`Prepared::key`] with the
/// key of the set in force, then [`Render::render`] it.
#[derive(Debug)]
pub struct Prepared {
    /// Equal keys mean equal desired sets (same inputs, same settings, same chart).
    pub key: String,
    revision: Revision,
    files: Files,
    units: Vec<(String, Unit)>,
    diagnostics: Vec<Diagnostic>,
}

impl Prepared {
    /// The renderers this revision runs, in order (`kustomize`, `helm`); empty for plain
    /// manifests.
    pub fn renderers(&self) -> Vec<&'static str> {
        self.units.iter().map(|(_, u)| u.renderer()).collect()
    }

    /// The key under which a later process may take up the desired set this revision reads
    /// as, without reading it again: [`Prepared::key`] with this build of driftless (its
    /// version and the GNU build id of its executable: its parser is the renderer; without a
    /// build id, `None`). `None` when a renderer runs (a `kustomize` or `helm` binary, whose own
    /// version no key covers) or the walk reported anything: such a set is read by every new
    /// process.
    pub fn reuse_key(&self) -> Option<String> {
        if !self.units.is_empty() || !self.diagnostics.is_empty() {
            return None;
        }
        Some(format!("{} {}", build_identity()?, self.key))
    }
}

/// This build of driftless: `driftless <version> <build id>`, the build id being the GNU build
/// id the linker wrote into the executable (`.note.gnu.build-id`, a digest of its contents),
/// read once; `None` when the executable has none or cannot be read, and then nothing is taken
/// up. (Its size and modification time, used before, can be equal for two builds: reproducible
/// builds clamp the time.)
fn build_identity() -> Option<&'static str> {
    static ID: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let exe = std::env::current_exe().ok()?;
        let id = gnu_build_id(&mut std::fs::File::open(exe).ok()?)?;
        Some(format!(
            "driftless {} {}",
            env!("CARGO_PKG_VERSION"),
            crate::source::hex(&id)
        ))
    })
    .as_deref()
}

/// The GNU build id of an ELF file (the `NT_GNU_BUILD_ID` note of a `PT_NOTE` segment), read
/// from its header, program headers and notes only; `None` when it is not a 64-bit
/// little-endian ELF file or has no such note. Layout: the System V ABI (ELF-64 object file
/// format) and `elf.h`.
pub fn gnu_build_id(file: &mut (impl std::io::Read + std::io::Seek)) -> Option<Vec<u8>> {
    use std::io::SeekFrom;
    let mut read_at = |at: u64, len: usize| -> Option<Vec<u8>> {
        file.seek(SeekFrom::Start(at)).ok()?;
        let mut buf = vec![0; len];
        file.read_exact(&mut buf).ok()?;
        Some(buf)
    };
    let u16_at = |b: &[u8], i: usize| Some(u16::from_le_bytes(b.get(i..i + 2)?.try_into().ok()?));
    let u32_at = |b: &[u8], i: usize| Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?));
    let u64_at = |b: &[u8], i: usize| Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?));
    let header = read_at(0, 64)?;
    // "\x7fELF", ELFCLASS64, ELFDATA2LSB.
    if header[..4] != *b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return None;
    }
    let (phoff, phentsize, phnum) = (
        u64_at(&header, 0x20)?,
        usize::from(u16_at(&header, 0x36)?),
        usize::from(u16_at(&header, 0x38)?),
    );
    if phentsize < 56 || phnum > 4096 {
        return None;
    }
    let table = read_at(phoff, phentsize * phnum)?;
    for ph in table.chunks_exact(phentsize) {
        // PT_NOTE; p_offset at 8, p_filesz at 32.
        if u32_at(ph, 0)? != 4 {
            continue;
        }
        let size = usize::try_from(u64_at(ph, 32)?).ok()?.min(1 << 16);
        let notes = read_at(u64_at(ph, 8)?, size)?;
        let mut i = 0;
        // Each note: namesz, descsz, type, then name and desc, each padded to 4 bytes.
        while i + 12 <= notes.len() {
            let namesz = usize::try_from(u32_at(&notes, i)?).ok()?;
            let descsz = usize::try_from(u32_at(&notes, i + 4)?).ok()?;
            let kind = u32_at(&notes, i + 8)?;
            let name_at = i + 12;
            let desc_at = name_at + namesz.next_multiple_of(4);
            let desc = notes.get(desc_at..desc_at.checked_add(descsz)?)?;
            if kind == 3 && notes.get(name_at..name_at + namesz)? == b"GNU\0" {
                return Some(desc.to_vec());
            }
            i = desc_at + descsz.next_multiple_of(4);
        }
    }
    None
}

/// One renderer run (or reuse) of the last [`Render::render`], for metrics and logs.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// `kustomize` or `helm`.
    pub renderer: &'static str,
    /// The overlay or chart, as shown in diagnostics.
    pub root: String,
    /// False when the output was reused from the cache.
    pub rendered: bool,
    /// How long it took (zero when reused).
    pub seconds: f64,
    /// False when it failed.
    pub ok: bool,
}

/// One app's render stage: its renderer and settings, the parse cache of the newest tree, and
/// the newest output of each rendered part.
#[derive(Debug, Default)]
pub struct Render {
    renderer: Renderer,
    options: manifest::Options,
    settings: Settings,
    /// Each file of the newest tree parsed, by (path, blob id).
    parsed: HashMap<(String, String), Arc<FileResult>>,
    /// The output of each rendered part, parsed, by its key.
    rendered: HashMap<String, Arc<Vec<FileResult>>>,
    /// Fields taken out of the declarations (`sync.ignore`).
    ignore: Vec<IgnoreRule>,
    /// The chart of `source.helm.chart`, as the source stage last resolved it.
    chart: Option<charts::Chart>,
    /// The runs of the last render.
    runs: Vec<Run>,
}

impl Render {
    /// A render stage for plain manifests that puts namespaced objects declaring no namespace
    /// in `default_namespace`.
    pub fn new(renderer: Renderer, default_namespace: &str) -> Self {
        Self {
            renderer,
            options: manifest::Options {
                default_namespace: default_namespace.to_string(),
            },
            settings: Settings {
                target_namespace: default_namespace.to_string(),
                ..Settings::default()
            },
            ..Self::default()
        }
    }

    /// The render stage of an app: its renderer, settings and target namespace.
    pub fn for_app(cfg: &AppConfig) -> Self {
        let mut render = Self::new(Renderer::for_app(cfg), &cfg.target.namespace.value);
        render.ignore = cfg.sync.ignore_rules();
        render.settings = Settings {
            app: cfg.name.value.clone(),
            repo: cfg.source.repo.value.clone(),
            path: source_path(&cfg.source.path.value),
            limits: cfg.source.limits.limits(),
            timeout: cfg.source.render_timeout.value,
            fetch_timeout: cfg.source.timeout.value,
            tools: cfg.source.tools.clone(),
            helm: cfg.source.helm.as_ref().map(|h| h.value.clone()),
            target_namespace: cfg.target.namespace.value.clone(),
        };
        render
    }

    /// What the render settings and the resolved chart add to an app's source identity: a
    /// change of either makes the revision in force be rendered again.
    pub fn identity(&self) -> String {
        let mut s = match self.renderer {
            Renderer::Auto => String::new(),
            Renderer::Kustomize => " kustomize".to_string(),
            Renderer::Helm => format!(
                " helm={}",
                short_hash(&helm_settings_text(
                    self.settings
                        .helm
                        .as_ref()
                        .unwrap_or(&HelmConfig::default())
                ))
            ),
        };
        if let Some(c) = &self.chart {
            s.push_str(&format!(" chart={}@{}#{}", c.name, c.version, c.digest));
        }
        s
    }

    /// The (version, digest) of the chart an app's recorded source identity (`applied`, whose
    /// tail is what [`Render::identity`] gave when it was applied) names, when it was applied
    /// with the same Helm settings (so the same repository and chart).
    fn pin_in(&self, applied: &str) -> Option<(String, String)> {
        let settings = self.identity();
        let settings = settings.split(" chart=").next().filter(|s| !s.is_empty())?;
        let (_, rest) = applied.split_once(&format!("{settings} chart="))?;
        let token = rest.split(' ').next()?;
        let (name_version, digest) = token.rsplit_once('#')?;
        let (_, version) = name_version.rsplit_once('@')?;
        Some((version.to_string(), digest.to_string()))
    }

    /// The source stage's part for a chart from a chart repository (`source.helm.chart`):
    /// resolves the version in the repository's index and fetches the archive when the cache
    /// lacks it. `applied` is the source identity the app's inventory records (what was
    /// applied): the chart digest in it is the pin that outlives the chart cache. Nothing to do
    /// (`Ok(None)`) for any other source.
    ///
    /// # Errors
    ///
    /// [`Error::ChartFailed`]. The chart resolved before stays the one rendered.
    pub async fn resolve_chart(
        &mut self,
        git: &GitCache,
        applied: Option<&str>,
    ) -> Result<Option<&charts::Chart>, Error> {
        let Some(c) = self.settings.helm.as_ref().and_then(|h| h.chart.clone()) else {
            return Ok(None);
        };
        let pin = applied.and_then(|a| self.pin_in(a));
        let resolved = git
            .charts()
            .resolve(
                &c.repository.value,
                &c.name.value,
                &c.version.value,
                pin.as_ref().map(|(v, d)| (v.as_str(), d.as_str())),
                self.settings.fetch_timeout,
            )
            .await
            .map_err(|source| Error::ChartFailed {
                source: Box::new(source),
                chart: format!(
                    "{} {} from {}",
                    c.name.value,
                    c.version.value,
                    source::redact_url(&c.repository.value)
                ),
            })?;
        if self.chart.as_ref() != Some(&resolved) {
            tracing::info!(app = %self.settings.app, chart = %resolved.name, version = %resolved.version, digest = %&resolved.digest[..12], "Chart resolved");
        }
        self.chart = Some(resolved);
        Ok(self.chart.as_ref())
    }

    /// The chart of `source.helm.chart` as last resolved, if any.
    pub fn chart(&self) -> Option<&charts::Chart> {
        self.chart.as_ref()
    }

    /// Reads what `cfg`'s path at `revision` renders from, without rendering: the plain files,
    /// the overlays and charts, the walk of their references (refusals become diagnostics),
    /// and the key that covers it all.
    ///
    /// `to_render`: the caller will render what this reads whatever its key (it holds no set
    /// in force this revision could turn out to be). With nothing parsed before either, every
    /// plain file is then read as it is listed: one pass over the Git objects instead of a
    /// listing (each object's header) and a read. Else the files are only listed, and
    /// [`Render::render`] reads those it has not parsed.
    ///
    /// # Errors
    ///
    /// [`Error::Source`]: [`source::Error::PathNotFound`] when the path is not a folder at that
    /// revision, or a cache failure; [`Error::ChartFailed`] when a chart repository's chart is
    /// needed and cannot be fetched.
    pub async fn prepare(
        &mut self,
        git: &GitCache,
        cfg: &AppConfig,
        revision: &Revision,
        to_render: bool,
    ) -> Result<Prepared, Error> {
        let s = &self.settings;
        if self.renderer == Renderer::Helm {
            let settings = s.helm.clone().unwrap_or_default();
            if settings.chart.is_some() && self.chart.is_none() {
                self.resolve_chart(git, None).await?;
            }
            let chart = match (&settings.chart, &self.chart) {
                (Some(_), Some(c)) => ChartSource::Remote(c.clone()),
                _ => ChartSource::Local(self.settings.path.clone()),
            };
            return self.prepare_helm(git, revision, settings, chart).await;
        }
        // Listed, not read: a key equal to the set in force's needs no contents, and a
        // render reads only the blobs it has not parsed before; unless all will be read.
        let (repo, path, limits) = (
            &cfg.source.repo.value,
            &cfg.source.path.value,
            cfg.source.limits.limits(),
        );
        let mut files = if to_render && self.parsed.is_empty() {
            git.read_selected(repo, revision, path, limits, manifest::is_manifest_path)
                .await?
        } else {
            git.read_listed(repo, revision, path, limits, manifest::is_manifest_path)
                .await?
        };
        let path = s.path.clone();
        let mut diagnostics = Vec::new();
        if files.charts.contains(&path) && self.renderer == Renderer::Auto {
            return self
                .prepare_helm(
                    git,
                    revision,
                    HelmConfig::default(),
                    ChartSource::Local(path),
                )
                .await;
        }
        // A chart at the path itself, with `source.kustomize`, is said below: no kustomization.
        for chart in std::mem::take(&mut files.charts)
            .into_iter()
            .filter(|c| *c != path)
        {
            diagnostics.push(Diagnostic::error(
                &join(&chart, "Chart.yaml"),
                1,
                1,
                format!("a Helm chart inside the app's path is not rendered: give it an app of its own (`source.path: {chart}`, with `source.helm` for its settings); nothing applied"),
            ));
        }
        if self.renderer == Renderer::Kustomize && !files.kustomizations.contains(&path) {
            diagnostics.push(Diagnostic::error(
                if path.is_empty() { "." } else { &path },
                1,
                1,
                "`source.kustomize` is set, but the app's path holds no kustomization file (kustomization.yaml, kustomization.yml or Kustomization); nothing applied",
            ));
        }
        let roots = std::mem::take(&mut files.kustomizations);
        let walks = if roots.is_empty() {
            Vec::new()
        } else {
            let roots2 = roots.clone();
            git.with_tree(&cfg.source.repo.value, revision, move |t| {
                let root_id = t.root_id();
                roots2
                    .iter()
                    .map(|r| (kustomize::walk(&GitTree(t), r), root_id.clone()))
                    .collect::<Vec<_>>()
            })
            .await?
        };
        let mut units = Vec::new();
        let mut key = Sha256::new();
        key.update(files.content_id.as_bytes());
        for (root, (walk, root_id)) in roots.into_iter().zip(walks) {
            diagnostics.extend(walk.diagnostics.iter().cloned());
            let mut k = format!("kustomize\0{root}\0");
            if walk.uncertain {
                k.push_str(&format!("root={root_id}\0"));
            }
            for (p, id) in &walk.reached {
                k.push_str(&format!("{p}={id}\0"));
            }
            let unit_key = hex(&Sha256::digest(k.as_bytes()));
            key.update(unit_key.as_bytes());
            units.push((unit_key, Unit::Kustomize { root, walk }));
        }
        let key = if units.is_empty() && diagnostics.is_empty() {
            files.content_id.clone()
        } else {
            for d in &diagnostics {
                key.update(d.to_string().as_bytes());
            }
            hex(&key.finalize())
        };
        Ok(Prepared {
            key,
            revision: revision.clone(),
            files,
            units,
            diagnostics,
        })
    }

    async fn prepare_helm(
        &mut self,
        git: &GitCache,
        revision: &Revision,
        settings: HelmConfig,
        chart: ChartSource,
    ) -> Result<Prepared, Error> {
        let path = self.settings.path.clone();
        let values: Vec<(String, String)> = settings
            .values_files
            .iter()
            .map(|v| (v.value.clone(), join(&path, &v.value)))
            .collect();
        let local = match &chart {
            ChartSource::Local(p) => Some(p.clone()),
            ChartSource::Remote(_) => None,
        };
        let (local2, path2) = (local.clone(), path.clone());
        let (path_entry, chart_file, value_entries) = git
            .with_tree(&self.settings.repo, revision, move |t| {
                let (local, path) = (local2, path2);
                let chart_file = local.as_ref().map(|p| t.entry(&join(p, "Chart.yaml")));
                let values: Vec<(String, Option<String>, Entry)> = values
                    .iter()
                    .map(|(raw, joined)| {
                        let n = kustomize::normalize(joined);
                        let e = n.as_deref().map_or(
                            Entry::Outside {
                                target: raw.clone(),
                            },
                            |n| t.entry(n),
                        );
                        (raw.clone(), n, e)
                    })
                    .collect();
                (t.entry(&path), chart_file, values)
            })
            .await?;
        let shown_path = if path.is_empty() { "." } else { path.as_str() };
        let mut diagnostics = Vec::new();
        let mut reached = BTreeMap::new();
        match &path_entry {
            Entry::Folder { id } => {
                if local.is_some() {
                    reached.insert(path.clone(), id.clone());
                }
            }
            _ => {
                return Err(Error::Source(source::Error::PathNotFound {
                    path: path.clone(),
                    revision: revision.0.clone(),
                    why: "does not exist or is not a folder",
                }));
            }
        }
        if let Some(f) = &chart_file
            && !matches!(f, Entry::File { .. })
        {
            diagnostics.push(Diagnostic::error(
                shown_path,
                1,
                1,
                "`source.helm` is set without `chart:`, but the app's path holds no Chart.yaml; point `source.path` at the chart's folder or name a chart repository in `source.helm.chart`; nothing applied",
            ));
        }
        let mut values_files = Vec::new();
        for (raw, normalized, entry) in value_entries {
            match (entry, normalized) {
                (Entry::File { id }, Some(n)) => {
                    reached.insert(n.clone(), id);
                    values_files.push(n);
                }
                (Entry::Outside { .. }, _) => diagnostics.push(Diagnostic::error(
                    shown_path,
                    1,
                    1,
                    format!("source.helm.valuesFiles: `{raw}` leads outside the repository; nothing applied"),
                )),
                _ => diagnostics.push(Diagnostic::error(
                    shown_path,
                    1,
                    1,
                    format!("source.helm.valuesFiles: `{raw}` is not a file in the repository at this revision (relative to `{shown_path}`); nothing applied"),
                )),
            }
        }
        let mut k = format!("helm\0{}\0", helm_settings_text(&settings));
        match &chart {
            ChartSource::Local(p) => k.push_str(&format!("local={p}\0")),
            ChartSource::Remote(c) => k.push_str(&format!(
                "remote={}/{}@{}#{}\0",
                c.repository, c.name, c.version, c.digest
            )),
        }
        for (p, id) in &reached {
            k.push_str(&format!("{p}={id}\0"));
        }
        for d in &diagnostics {
            k.push_str(&d.to_string());
        }
        let key = hex(&Sha256::digest(k.as_bytes()));
        let files = Files {
            content_id: path_entry.id().unwrap_or_default().to_string(),
            ..Files::default()
        };
        Ok(Prepared {
            key: key.clone(),
            revision: revision.clone(),
            files,
            units: vec![(
                key,
                Unit::Helm {
                    chart,
                    settings,
                    values_files,
                    reached,
                },
            )],
            diagnostics,
        })
    }

    /// [`Render::prepare`], then [`Render::render`].
    ///
    /// # Errors
    ///
    /// As [`Render::prepare`] and [`Render::render`].
    pub async fn read(
        &mut self,
        git: &GitCache,
        cfg: &AppConfig,
        revision: &Revision,
    ) -> Result<DesiredSet, Error> {
        let prepared = self.prepare(git, cfg, revision, true).await?;
        self.render(git, prepared).await
    }

    /// The desired set `prepared` declares, with every diagnostic. Plain files whose (path,
    /// blob id) were parsed before are not parsed again; rendered parts whose key was rendered
    /// before are not rendered again (the caches keep this revision's entries only). A
    /// revision with a refused reference runs no renderer.
    ///
    /// # Errors
    ///
    /// [`Error::RendererMissing`], [`Error::SpawnFailed`], [`Error::Failed`],
    /// [`Error::TimedOut`], [`Error::OutputTooLarge`], [`Error::WriteFailed`], and
    /// [`Error::Source`] when the files to write out cannot be read.
    pub async fn render(
        &mut self,
        git: &GitCache,
        prepared: Prepared,
    ) -> Result<DesiredSet, Error> {
        self.runs.clear();
        let Prepared {
            revision,
            mut files,
            units,
            mut diagnostics,
            ..
        } = prepared;
        if files.unread {
            let misses: std::collections::HashSet<String> = files
                .files
                .iter()
                .filter(|(p, _)| !self.has_parsed(&files, p))
                .map(|(p, _)| p.clone())
                .collect();
            files = git
                .read_contents(&self.settings.repo, files, misses)
                .await?;
        }
        let (mut results, walked) = self.plain(files);
        diagnostics.splice(0..0, walked);
        let refused = diagnostics.iter().any(Diagnostic::is_error);
        if !refused && !units.is_empty() {
            let fresh = self.render_units(git, &revision, &units).await?;
            match fresh {
                Ok(()) => {
                    for (key, _) in &units {
                        if let Some(r) = self.rendered.get(key) {
                            results.extend(r.iter().cloned());
                        }
                    }
                }
                Err(found) => diagnostics.extend(found),
            }
        }
        let keep: BTreeSet<&String> = units.iter().map(|(k, _)| k).collect();
        self.rendered.retain(|k, _| keep.contains(k));
        let mut set = manifest::assemble(results, diagnostics, &self.options);
        // What another writer owns (`sync.ignore`) is not Git's: out of the declaration
        // before anything compares or applies it.
        if !self.ignore.is_empty() {
            for (key, declared) in &mut set.objects {
                ignore::strip(key, &mut declared.object, &self.ignore);
            }
        }
        Ok(set)
    }

    /// The runs of the last [`Render::render`]: one per rendered part, reused or not.
    pub fn runs(&self) -> &[Run] {
        &self.runs
    }

    /// Renders the parts not in the cache. `Ok(Err(diagnostics))` when the private copy
    /// could not be made because the repository holds a refused symlink or is past a limit.
    async fn render_units(
        &mut self,
        git: &GitCache,
        revision: &Revision,
        units: &[(String, Unit)],
    ) -> Result<Result<(), Vec<Diagnostic>>, Error> {
        let missing: Vec<&(String, Unit)> = units
            .iter()
            .filter(|(k, _)| !self.rendered.contains_key(k))
            .collect();
        for (key, unit) in units {
            if self.rendered.contains_key(key) {
                self.runs.push(Run {
                    renderer: unit.renderer(),
                    root: unit_root(unit),
                    rendered: false,
                    seconds: 0.0,
                    ok: true,
                });
            }
        }
        if missing.is_empty() {
            return Ok(Ok(()));
        }
        let mut paths: Vec<String> = missing.iter().flat_map(|(_, u)| u.paths()).collect();
        paths.sort();
        paths.dedup();
        let limits = self.settings.limits;
        let files = git
            .with_tree(&self.settings.repo, revision, move |t| {
                t.read_all(&paths, limits)
            })
            .await??;
        if files.diagnostics.iter().any(Diagnostic::is_error) {
            return Ok(Err(files.diagnostics));
        }
        // Absolute: the renderer runs in the private folder, so every path given to it must be.
        let base =
            std::path::absolute(git.dir().join("render")).map_err(|source| Error::WriteFailed {
                path: git.dir().join("render"),
                source,
            })?;
        // What an error message of the renderers must not show (Secret values in the input).
        let mut helm_values: Option<&serde_json::Value> = None;
        let mut helm_files: Vec<String> = Vec::new();
        for (_, unit) in &missing {
            // The values the app gives (a chart's own defaults are its author's, not secrets).
            if let Unit::Helm {
                settings,
                values_files,
                ..
            } = unit
            {
                helm_values = settings.values.as_ref().map(|v| &v.value);
                helm_files.extend(values_files.iter().cloned());
            }
        }
        let hidden = redact::sensitive(&files, helm_values, &helm_files);
        let private = write_private(&base, files).await?;
        for (key, unit) in missing {
            let started = Instant::now();
            let result = self.run_unit(unit, private.path(), &hidden).await;
            self.runs.push(Run {
                renderer: unit.renderer(),
                root: unit_root(unit),
                rendered: true,
                seconds: started.elapsed().as_secs_f64(),
                ok: result.is_ok(),
            });
            let parsed = result?;
            tracing::info!(
                app = %self.settings.app,
                renderer = unit.renderer(),
                root = %unit_root(unit),
                seconds = started.elapsed().as_secs_f64(),
                "Rendered"
            );
            self.rendered.insert(key.clone(), Arc::new(parsed));
        }
        Ok(Ok(()))
    }

    /// Runs one part's renderer in `private` and parses its output.
    async fn run_unit(
        &self,
        unit: &Unit,
        private: &Path,
        hidden: &[String],
    ) -> Result<Vec<FileResult>, Error> {
        let s = &self.settings;
        match unit {
            Unit::Kustomize { root, .. } => {
                let program = locate(s.tools.kustomize.as_deref(), "kustomize")?;
                let shown = if root.is_empty() { "." } else { root.as_str() };
                // `./` first: a folder named `--load-restrictor=...` is a path, not a flag.
                let args: Vec<OsString> = vec!["build".into(), format!("./{root}").into()];
                let command = format!("kustomize build {shown}");
                let out = run_checked(&program, &args, private, s, &command, hidden).await?;
                Ok(vec![parse_output(
                    &kustomize_output_path(shown),
                    &out,
                    None,
                )])
            }
            Unit::Helm {
                chart,
                settings,
                values_files,
                ..
            } => {
                let program = locate(s.tools.helm.as_deref(), "helm")?;
                let release = settings
                    .release_name
                    .as_ref()
                    .map_or(s.app.as_str(), |r| r.value.as_str());
                let namespace = settings
                    .namespace
                    .as_ref()
                    .map_or(s.target_namespace.as_str(), |n| n.value.as_str());
                let (chart_arg, shown_root): (OsString, String) = match chart {
                    ChartSource::Local(p) => (format!("./{p}").into(), p.clone()),
                    ChartSource::Remote(c) => (
                        std::path::absolute(&c.archive)
                            .unwrap_or_else(|_| c.archive.clone())
                            .into_os_string(),
                        format!("{}-{}", c.name, c.version),
                    ),
                };
                let mut values: Vec<OsString> = values_files
                    .iter()
                    .map(|v| OsString::from(format!("./{v}")))
                    .collect();
                if let Some(v) = &settings.values {
                    let file = private.join(".driftless-values.json");
                    std::fs::write(&file, v.value.to_string()).map_err(|source| {
                        Error::WriteFailed {
                            path: file.clone(),
                            source,
                        }
                    })?;
                    values.push(file.into_os_string());
                }
                let invocation = helm::Invocation {
                    release,
                    namespace,
                    chart: chart_arg,
                    values,
                    settings,
                };
                let command = format!(
                    "helm template {release} {}",
                    if shown_root.is_empty() {
                        "."
                    } else {
                        &shown_root
                    }
                );
                let out =
                    run_checked(&program, &invocation.args(), private, s, &command, hidden).await?;
                let text = String::from_utf8_lossy(&out);
                let mut results: Vec<FileResult> = helm::split(&text, &shown_root)
                    .into_iter()
                    .map(|seg| parse_output(&seg.path, seg.text.as_bytes(), Some(&command)))
                    .collect();
                // What a chart leaves without a namespace goes to the release's namespace, as
                // `helm install --namespace` puts it.
                for r in &mut results {
                    for d in &mut r.objects {
                        let o = &mut d.object;
                        if o.namespace().is_empty()
                            && !crate::object::is_cluster_scoped(o.group(), o.kind())
                        {
                            o.set_namespace(namespace);
                        }
                    }
                }
                Ok(results)
            }
        }
    }

    /// The desired set `files` declare (read from disk or from Git without rendering): plain
    /// manifests only, with the walk's diagnostics. For `driftless validate` and tests.
    pub fn render_files(&mut self, files: Files) -> DesiredSet {
        let (results, diagnostics) = self.plain(files);
        manifest::assemble(results, diagnostics, &self.options)
    }

    /// True when the file at `path` of `files` (by its blob id) was parsed for the last
    /// revision: its result is reused, its contents need not be read.
    fn has_parsed(&self, files: &Files, path: &str) -> bool {
        files.blob_ids.get(path).is_some_and(|id| {
            !id.is_empty() && self.parsed.contains_key(&(path.to_string(), id.clone()))
        })
    }

    /// The plain files parsed (through the cache), in path order, and the walk's diagnostics.
    fn plain(&mut self, mut files: Files) -> (Vec<FileResult>, Vec<Diagnostic>) {
        // In path order, whatever the source (Git trees are; a folder walk may not be).
        files.files.sort_by(|a, b| a.0.cmp(&b.0));
        let key = |path: &str| {
            (
                path.to_string(),
                files.blob_ids.get(path).cloned().unwrap_or_default(),
            )
        };
        let cached = |k: &(String, String)| self.has_parsed(&files, &k.0);
        let misses: Vec<(&str, &[u8])> = files
            .files
            .iter()
            .filter(|(p, _)| !cached(&key(p)))
            .map(|(p, b)| (p.as_str(), b.as_slice()))
            .collect();
        let fresh = manifest::parse_many(&misses, &self.options);
        let parsed = misses.len();
        let mut next: HashMap<(String, String), Arc<FileResult>> = HashMap::new();
        let mut results = Vec::with_capacity(files.files.len());
        let mut fresh = misses.iter().zip(fresh);
        for (path, _) in &files.files {
            let k = key(path);
            let r = if cached(&k) {
                self.parsed[&k].clone()
            } else {
                match fresh.next() {
                    Some((_, r)) => Arc::new(r),
                    None => continue,
                }
            };
            results.push((*r).clone());
            if !k.1.is_empty() {
                next.insert(k, r);
            }
        }
        if !files.files.is_empty() {
            tracing::debug!(
                parsed,
                reused = files.files.len() - parsed,
                "Manifests parsed (unchanged files reused by blob id)"
            );
        }
        self.parsed = next;
        (results, files.diagnostics)
    }
}

/// Each renderer (`kustomize`, `helm`) as `tools` (else the PATH) finds it: its path and the
/// version it reports (`kustomize version`, `helm version --short`), or why not.
pub async fn tool_versions(
    tools: &RenderTools,
) -> Vec<(&'static str, Result<(PathBuf, String), String>)> {
    let mut out = Vec::new();
    for (name, configured, args) in [
        ("kustomize", tools.kustomize.as_deref(), vec!["version"]),
        ("helm", tools.helm.as_deref(), vec!["version", "--short"]),
    ] {
        let located = run::locate(configured, name).map(|p| std::path::absolute(&p).unwrap_or(p));
        let found = match located {
            Err(why) => Err(why),
            Ok(path) => match tempfile::Builder::new()
                .prefix("driftless-version-")
                .tempdir()
            {
                Err(e) => Err(e.to_string()),
                Ok(private) => {
                    let args: Vec<OsString> = args.into_iter().map(OsString::from).collect();
                    match run::run(
                        &path,
                        &args,
                        private.path(),
                        private.path(),
                        Duration::from_secs(10),
                        1 << 16,
                    )
                    .await
                    {
                        Ok(o) => Ok((path, String::from_utf8_lossy(&o.stdout).trim().to_string())),
                        Err(run::Failure::Missing(e)) => {
                            Err(format!("cannot run {}: {e}", path.display()))
                        }
                        Err(f) => Err(format!(
                            "{} did not report a version: {f:?}",
                            path.display()
                        )),
                    }
                }
            },
        };
        out.push((name, found));
    }
    out
}

/// `e` and its sources, `: `-joined, as the logs and conditions show errors.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        next = s.source();
    }
    text
}

/// The renderer named `name`, as an absolute path (it runs in the private folder), or
/// [`Error::RendererMissing`].
fn locate(configured: Option<&Path>, name: &'static str) -> Result<PathBuf, Error> {
    let found = run::locate(configured, name).map_err(|looked| Error::RendererMissing {
        renderer: name,
        looked,
    })?;
    Ok(std::path::absolute(&found).unwrap_or(found))
}

/// Runs a renderer and maps its failures to errors naming `command`.
async fn run_checked(
    program: &Path,
    args: &[OsString],
    private: &Path,
    s: &Settings,
    command: &str,
    hidden: &[String],
) -> Result<Vec<u8>, Error> {
    let name: &'static str = if command.starts_with("helm") {
        "helm"
    } else {
        "kustomize"
    };
    match run::run(
        program,
        args,
        private,
        private,
        s.timeout,
        s.limits.max_bytes,
    )
    .await
    {
        Ok(out) => {
            if !out.stderr.is_empty() {
                tracing::debug!(command, stderr = %redact::hide(&out.stderr, hidden), "Renderer printed warnings");
            }
            Ok(out.stdout)
        }
        Err(run::Failure::Missing(e)) => Err(Error::RendererMissing {
            renderer: name,
            looked: format!("cannot run {}: {e}", program.display()),
        }),
        Err(run::Failure::Spawn(source)) => Err(Error::SpawnFailed {
            command: command.to_string(),
            source,
        }),
        Err(run::Failure::Exited(stderr)) => Err(Error::Failed {
            command: command.to_string(),
            stderr: redact::hide(&stderr, hidden),
        }),
        Err(run::Failure::TimedOut) => Err(Error::TimedOut {
            command: command.to_string(),
            seconds: s.timeout.as_secs(),
        }),
        Err(run::Failure::TooLarge) => Err(Error::OutputTooLarge {
            command: command.to_string(),
            limit: s.limits.max_bytes,
        }),
    }
}

/// A renderer's output as one file of the set named `path`, read as kubectl reads YAML; with
/// `command`, every diagnostic says whose output its line and column are in.
fn parse_output(path: &str, bytes: &[u8], command: Option<&str>) -> FileResult {
    if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        return FileResult::default();
    }
    let mut r = manifest::parse_file_with(path, bytes, manifest::Mode::Rendered);
    if let Some(command) = command {
        for d in &mut r.diagnostics {
            d.message
                .push_str(&format!(" (in the output of `{command}`)"));
        }
    }
    r
}

/// What the output of `kustomize build <root>` is named in diagnostics and in an object's
/// place: `apps/staging (kustomize build)`, its lines and columns those of the output (it is no
/// file of the repository: kustomize's output does not say which file an object came from).
fn kustomize_output_path(root: &str) -> String {
    format!("{root} (kustomize build)")
}

/// Writes `files` into a new private folder under `base` (mode 0700, removed when dropped).
async fn write_private(base: &Path, files: Files) -> Result<tempfile::TempDir, Error> {
    let base = base.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let failed = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::WriteFailed { path, source }
        };
        std::fs::create_dir_all(&base).map_err(failed(&base))?;
        let dir = tempfile::Builder::new()
            .prefix("render-")
            .tempdir_in(&base)
            .map_err(failed(&base))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .map_err(failed(dir.path()))?;
        for (path, bytes) in files.files {
            // Repository paths are normalized by the walk: no `..`, no absolute path.
            let to = dir.path().join(&path);
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent).map_err(failed(parent))?;
            }
            std::fs::write(&to, bytes).map_err(failed(&to))?;
        }
        Ok(dir)
    })
    .await
    .map_err(|e| Error::WriteFailed {
        path: PathBuf::new(),
        source: std::io::Error::other(e.to_string()),
    })?
}

/// The overlay or chart a part renders, as shown.
fn unit_root(unit: &Unit) -> String {
    match unit {
        Unit::Kustomize { root, .. } => root.clone(),
        Unit::Helm {
            chart: ChartSource::Local(p),
            ..
        } => p.clone(),
        Unit::Helm {
            chart: ChartSource::Remote(c),
            ..
        } => format!("{}-{}", c.name, c.version),
    }
}

/// The Helm settings as one text (without positions): two configs that render alike give the
/// same text.
fn helm_settings_text(h: &HelmConfig) -> String {
    let opt = |v: &Option<serde_saphyr::Spanned<String>>| v.as_ref().map(|v| v.value.clone());
    let list =
        |v: &[serde_saphyr::Spanned<String>]| v.iter().map(|v| v.value.clone()).collect::<Vec<_>>();
    serde_json::json!({
        "releaseName": opt(&h.release_name),
        "namespace": opt(&h.namespace),
        "valuesFiles": list(&h.values_files),
        "values": h.values.as_ref().map(|v| v.value.clone()),
        "includeCRDs": h.include_crds,
        "kubeVersion": opt(&h.kube_version),
        "apiVersions": list(&h.api_versions),
        "skipTests": h.skip_tests,
        "noHooks": h.no_hooks,
        "chart": h.chart.as_ref().map(|c| format!("{} {} {}", c.repository.value, c.name.value, c.version.value)),
    })
    .to_string()
}

/// The app's path as a repository path (`""` for the root).
fn source_path(path: &str) -> String {
    kustomize::normalize(path).unwrap_or_default()
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

fn short_hash(text: &str) -> String {
    hex(&Sha256::digest(text.as_bytes()))[..12].to_string()
}

/// A Git tree as the walk reads it.
struct GitTree<'a, 'r>(&'a source::TreeReader<'r>);

impl Tree for GitTree<'_, '_> {
    fn entry(&self, path: &str) -> Entry {
        self.0.entry(path)
    }
    fn read(&self, path: &str) -> Option<Vec<u8>> {
        self.0.read(path).ok().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The build id of this test executable is the one `readelf -n` (binutils) prints; what is
    /// not a 64-bit ELF file, or is cut short, has none.
    #[test]
    fn the_gnu_build_id_is_the_one_readelf_prints() {
        let exe = std::env::current_exe().unwrap();
        let id = gnu_build_id(&mut std::fs::File::open(&exe).unwrap()).expect("a build id");
        let out = std::process::Command::new("readelf")
            .arg("-n")
            .arg(&exe)
            .output()
            .expect("readelf (binutils) runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let printed = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("Build ID: "))
            .expect("readelf prints a build id");
        assert_eq!(crate::source::hex(&id), printed);
        assert!(build_identity().unwrap().ends_with(printed));
        let bytes = std::fs::read(&exe).unwrap();
        for cut in [0, 16, 64, 200] {
            assert_eq!(gnu_build_id(&mut std::io::Cursor::new(&bytes[..cut])), None);
        }
        let mut not_elf = bytes[..4096].to_vec();
        not_elf[0] = b'#';
        assert_eq!(gnu_build_id(&mut std::io::Cursor::new(not_elf)), None);
    }
}
