//! Git sources: fetch into a bare cache, resolve refs, read manifests from tree objects.
//!
//! Each repository URL gets one bare repository under the cache directory
//! (`<cache>/repos/<name>-<hash>.git`). Fetches are incremental: libgit2 negotiates with what the
//! cache already holds, so a new commit costs only its new objects. Files are read straight from
//! the tree objects of a commit; nothing is checked out. git2 is blocking, so every call runs
//! in `spawn_blocking`, and one fetch per cache runs at a time.
//!
//! Symlinks (ARCHITECTURE.md section 5): a link is followed only when its target, resolved against
//! the link's folder, stays inside the repository; any other link is an error diagnostic for the
//! link's path, and its target is never read.

pub mod charts;
mod config;
mod http;
mod tree;
pub use config::{
    AuthConfig, ChartConfig, HelmConfig, KustomizeConfig, RenderTools, SourceConfig,
    SourceLimitsConfig, VerifyConfig, VerifyMode,
};
pub use tree::{Entry, TreeReader};

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use git2::{AutotagOption, Direction, FetchOptions, ObjectType, Oid, Repository};
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};

use crate::manifest::{self, Diagnostic};
use crate::object::Revision;

/// Errors from a Git source.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cache repository could not be created or opened.
    #[error("cannot open the repository cache at {path}")]
    CacheFailed {
        /// The cache path.
        path: PathBuf,
        /// libgit2's error.
        #[source]
        source: git2::Error,
    },
    /// Listing or fetching from the remote failed (unreachable, refused, not a repository).
    #[error("cannot fetch {url}")]
    FetchFailed {
        /// The repository URL as configured.
        url: String,
        /// libgit2's error.
        #[source]
        source: git2::Error,
    },
    /// The repository is a local path that does not exist.
    #[error("repository {url} does not exist")]
    RepositoryNotFound {
        /// The path as configured.
        url: String,
    },
    /// The ref is neither a branch, a tag, a full ref name nor a commit id of the repository.
    #[error("ref `{reference}` not found in {url}")]
    RefNotFound {
        /// The ref as configured (`HEAD` for the default).
        reference: String,
        /// The repository URL.
        url: String,
    },
    /// The app's path is not a folder at the revision: it does not exist, names a file, or is
    /// a symbolic link that leaves the repository or loops.
    #[error("path `{path}` {why} at revision {revision}")]
    PathNotFound {
        /// The configured path.
        path: String,
        /// The commit.
        revision: String,
        /// What is there instead (`does not exist`, `is a file, not a folder ...`).
        why: &'static str,
    },
    /// Reading objects from the cache failed.
    #[error("cannot read {what} from the repository cache")]
    ReadFailed {
        /// What was being read.
        what: String,
        /// libgit2's error.
        #[source]
        source: git2::Error,
    },
    /// The fetch (waiting for the cache's lock included) took longer than its timeout. The
    /// transfer is aborted as soon as data flows again; libgit2's own socket timeouts
    /// ([`set_socket_timeouts`]) end a silent connection.
    #[error("fetching {url} timed out after {seconds} s")]
    TimedOut {
        /// The repository URL.
        url: String,
        /// The timeout, in seconds.
        seconds: u64,
    },
    /// The server refused the credentials of `source.auth`, or asked for some and none were
    /// given.
    #[error("authentication to {url} failed: {message}")]
    AuthenticationFailed {
        /// The repository URL, credentials removed.
        url: String,
        /// What the transport said.
        message: String,
    },
    /// The SSH server's host key is not in `knownHosts` (`changed: false`), or `knownHosts` has
    /// another key for that host (`changed: true`).
    #[error("host key of {host} {}: the server offers {fingerprint}", if *changed { "changed (knownHosts has another key for it)" } else { "is not in knownHosts" })]
    HostKeyMismatch {
        /// The host.
        host: String,
        /// The offered key's fingerprint, `SHA256:<base64>` as `ssh-keygen -l` prints it.
        fingerprint: String,
        /// True when known_hosts has a different key for the host.
        changed: bool,
    },
    /// The server could not be reached (connection refused, no route, DNS, reset).
    #[error("cannot reach {url}")]
    Unreachable {
        /// The repository URL, credentials removed.
        url: String,
        /// libgit2's error.
        #[source]
        source: git2::Error,
    },
    /// The commit carries no signature, or one no allowed signer made (`source.verify`).
    #[error("commit {revision} {reason}")]
    SignatureRejected {
        /// The commit.
        revision: String,
        /// `is not signed`, `is signed by a key that is not in allowedSigners (SHA256:...)`...
        reason: String,
    },
    /// The blocking task running git2 panicked or was cancelled.
    #[error("git task failed")]
    TaskFailed(#[source] tokio::task::JoinError),
}

/// Result alias for source operations.
pub type Result<T> = std::result::Result<T, Error>;

/// The outcome of a fetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    /// The commit the ref points at.
    pub revision: Revision,
    /// The full ref name resolved (`refs/heads/main`), or the commit id when a commit was asked.
    pub resolved_ref: String,
    /// Objects received by this fetch (0 when the cache already had everything): how
    /// incremental it was.
    pub received_objects: usize,
    /// The commit the ref pointed at in the cache before this fetch, when it moved.
    pub previous: Option<Revision>,
    /// True when the ref moved to a commit that does not descend from `previous` (a force
    /// push rewrote history). False when it does, or when a shallow cache cannot tell.
    pub rewritten: bool,
}

/// Bounds on reading an app's path from a Git tree (`apps[].source.limits`). A tree is small
/// in Git and can be huge when walked: one folder listed twice in its parent, 24 levels deep, is
/// about 130 KB of Git objects and 16 million files. Past any bound the walk stops and the
/// revision is refused with an error diagnostic (nothing of it applied; the revision in force
/// stays enforced, a preview of it fails alone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Tree entries visited under the app's path, files and folders, every time a repeated
    /// folder is seen. Default 250,000.
    pub max_entries: u64,
    /// Bytes of manifest files read, in total. Default 256 MiB.
    pub max_bytes: u64,
    /// Folders below the app's path, symlinked folders included. Default 64.
    pub max_depth: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_entries: 250_000,
            max_bytes: 256 << 20,
            max_depth: 64,
        }
    }
}

/// The manifest files of an app's path at one revision, and what was found on the way.
#[derive(Clone, Debug, Default)]
pub struct Files {
    /// `(path inside the repository, contents)`, in path order. Each contents is empty while
    /// [`Files::unread`] is set.
    pub files: Vec<(String, Vec<u8>)>,
    /// Set by [`GitCache::read_listed`]: the files were listed (path, blob id, size counted
    /// against the limits) and not read; [`GitCache::read_contents`] reads those it is asked
    /// for.
    pub unread: bool,
    /// Symlink errors and similar, each naming the link's path.
    pub diagnostics: Vec<Diagnostic>,
    /// What the walk read, as one id: equal ids mean equal files read. The id of the tree at
    /// the app's path; when the walk followed a symlink (whose target's contents that tree does
    /// not cover: a link to `../shared/x.yaml` is the same tree entry whatever `x.yaml` holds),
    /// a SHA-256 of that id and of each file's path and blob id instead.
    pub content_id: String,
    /// The blob id of each file, by path: equal ids mean equal bytes.
    pub blob_ids: HashMap<String, String>,
    /// Folders (the path itself included) that hold a kustomization file
    /// ([`KUSTOMIZATION_FILES`]): the walk did not read into them, since their files are
    /// rendered by `kustomize build`, never applied one by one (Flux reads an app's path so).
    pub kustomizations: Vec<String>,
    /// Folders (the path itself included) that hold a Helm chart (`Chart.yaml`) and no
    /// kustomization file; likewise not read into.
    pub charts: Vec<String>,
}

/// The names `kustomize build` looks for in a folder (`konfig.RecognizedKustomizationFileNames`),
/// in its order.
pub const KUSTOMIZATION_FILES: [&str; 3] =
    ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// How to authenticate to one repository and check its SSH host key (`source.auth`). Secrets
/// stay in `secrecy` types; `Debug` shows none of them.
#[derive(Clone, Default)]
pub struct Auth {
    /// HTTP Basic username (default `git`), or the SSH user when the URL names none.
    pub username: Option<String>,
    /// A token or password, sent as the HTTP Basic password.
    pub secret: Option<SecretString>,
    /// An SSH private key (OpenSSH or PEM text).
    pub ssh_key: Option<SecretString>,
    /// known_hosts text (`host[,host...] keytype base64` lines; `[host]:port` patterns match
    /// the host on any port; hashed `|1|` entries are not read).
    pub known_hosts: Option<String>,
    /// Accept any SSH host key. Logged as a warning at every connection.
    pub insecure_skip_host_key_check: bool,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("username", &self.username)
            .field("secret", &self.secret.as_ref().map(|_| "[redacted]"))
            .field("ssh_key", &self.ssh_key.as_ref().map(|_| "[redacted]"))
            .field(
                "known_hosts",
                &self.known_hosts.as_ref().map(|k| k.lines().count()),
            )
            .field(
                "insecure_skip_host_key_check",
                &self.insecure_skip_host_key_check,
            )
            .finish()
    }
}

/// `url` fit to show: the user information of an `http(s)://` URL (which may hold a token)
/// becomes `***`, and so do its query and fragment (`?token=...`); an SSH user name (`git@`)
/// stays.
///
/// The last `@` of the URL ends the user information, wherever it is: a badly written password
/// may hold a `/`, `?` or `#` (which a URL reader takes for the path, query or fragment), and an
/// `@` in a path or query hides more than needed, never less.
pub fn redact_url(url: &str) -> String {
    let hide_query = |rest: &str| match rest.find(['?', '#']) {
        Some(i) => format!("{}{}***", &rest[..i], &rest[i..=i]),
        None => rest.to_string(),
    };
    let Some((scheme, rest)) = url.split_once("://") else {
        return hide_query(url);
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => {
            let keep = !scheme.starts_with("http") && !userinfo.contains([':', '/', '?', '#']);
            let shown = if keep { userinfo } else { "***" };
            format!("{scheme}://{shown}@{}", hide_query(host))
        }
        None => format!("{scheme}://{}", hide_query(rest)),
    }
}

/// The host (and port) of a URL, lowercase: `https://u@Host:8443/x` gives `host:8443`;
/// scp-like `git@host:path` gives `host`.
fn host_of(url: &str) -> Option<String> {
    let rest = match url.split_once("://") {
        Some((_, rest)) => rest,
        None => url.split_once(':')?.0,
    };
    let authority = match rest.rsplit_once('@') {
        Some((_, h)) => h.split('/').next().unwrap_or(h),
        None => rest.split('/').next().unwrap_or(rest),
    };
    Some(authority.to_ascii_lowercase())
}

/// OpenSSH's fingerprint of a public key blob: `SHA256:` and the unpadded base64 of its
/// SHA-256.
pub fn fingerprint(blob: &[u8]) -> String {
    use base64::Engine as _;
    format!(
        "SHA256:{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(Sha256::digest(blob))
    )
}

/// True when a known_hosts host pattern names `host` on `port` (`None`: the URL gave none,
/// so any `[host]:port` entry matches too). Plain names are port 22; `[host]:port` entries
/// name that port; hashed entries (`|1|salt|hash`, from `ssh-keyscan -H`) are the HMAC-SHA1 of
/// that same name, as OpenSSH writes them. Wildcards are not read.
fn host_pattern_matches(pattern: &str, host: &str, port: Option<u16>) -> bool {
    use base64::Engine as _;
    use hmac::{KeyInit, Mac};
    let name = match port {
        Some(p) if p != 22 => format!("[{host}]:{p}"),
        _ => host.to_string(),
    };
    if let Some(hashed) = pattern.strip_prefix("|1|") {
        let b64 = base64::engine::general_purpose::STANDARD;
        let Some((salt, hash)) = hashed.split_once('|') else {
            return false;
        };
        let (Ok(salt), Ok(hash)) = (b64.decode(salt), b64.decode(hash)) else {
            return false;
        };
        let Ok(mut mac) = hmac::Hmac::<sha1::Sha1>::new_from_slice(&salt) else {
            return false;
        };
        mac.update(name.as_bytes());
        return mac.verify_slice(&hash).is_ok();
    }
    match port {
        None => pattern == host || pattern.starts_with(&format!("[{host}]:")),
        Some(_) => pattern == name,
    }
}

/// The verdict of known_hosts text on `host` (reached on `port`, when the URL names one)
/// offering key `blob`: `Ok` when listed, else the [`Error::HostKeyMismatch`] to report.
pub fn check_known_host(
    known_hosts: &str,
    host: &str,
    port: Option<u16>,
    blob: &[u8],
) -> Result<()> {
    use base64::Engine as _;
    let mut listed = false;
    for line in known_hosts.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        // `@revoked hosts type key`: that key is refused wherever it is offered.
        if let Some(revoked) = line.strip_prefix("@revoked") {
            let key = revoked.split_whitespace().nth(2);
            if key.is_some_and(|k| {
                base64::engine::general_purpose::STANDARD
                    .decode(k)
                    .is_ok_and(|k| k == blob)
            }) {
                return Err(Error::HostKeyMismatch {
                    host: host.to_string(),
                    fingerprint: fingerprint(blob),
                    changed: true,
                });
            }
            continue;
        }
        if line.starts_with('@') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let (Some(hosts), Some(_kind), Some(key)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let matches = hosts
            .split(',')
            .any(|p| host_pattern_matches(p, host, port));
        if !matches {
            continue;
        }
        listed = true;
        if base64::engine::general_purpose::STANDARD
            .decode(key)
            .is_ok_and(|k| k == blob)
        {
            return Ok(());
        }
    }
    Err(Error::HostKeyMismatch {
        host: host.to_string(),
        fingerprint: fingerprint(blob),
        changed: listed,
    })
}

/// One connection's callbacks and what they saw, to tell why a transfer failed.
struct Session<'s> {
    /// The host (and port) of the configured URL: credentials go there and nowhere else.
    host: Option<String>,
    /// The port the configured URL names, if any.
    port: Option<u16>,
    auth: Option<&'s Auth>,
    cancel: &'s std::sync::atomic::AtomicBool,
    /// A host key refused by the check.
    rejected: std::cell::RefCell<Option<Error>>,
    /// `auth` for the http(s) transports libgit2 makes on this thread meanwhile
    /// ([`http::Scope`]).
    _http: http::Scope,
}

impl<'s> Session<'s> {
    fn new(
        url: &str,
        auth: Option<&'s Auth>,
        cancel: &'s Arc<std::sync::atomic::AtomicBool>,
    ) -> Self {
        Self {
            host: host_of(url),
            port: host_of(url).and_then(|h| h.rsplit_once(':').and_then(|(_, p)| p.parse().ok())),
            auth,
            cancel,
            rejected: std::cell::RefCell::new(None),
            _http: http::Scope::enter(auth, cancel.clone()),
        }
    }

    fn callbacks(&self) -> git2::RemoteCallbacks<'_> {
        use git2::{CertificateCheckStatus, Cred, CredentialType};
        let mut cb = git2::RemoteCallbacks::new();
        // Returning false aborts the transfer: how a timed-out fetch stops.
        cb.transfer_progress(|_| !self.cancel.load(std::sync::atomic::Ordering::Relaxed));
        cb.sideband_progress(|_| !self.cancel.load(std::sync::atomic::Ordering::Relaxed));
        // Per connection: libgit2 asks again after a refusal, and once is enough to know.
        let mut given = 0u32;
        cb.credentials(move |asking, user_from_url, allowed| {
            // A redirect to another host never gets the credentials.
            if host_of(asking) != self.host {
                return Err(git2::Error::from_str(
                    "refusing to send credentials to another host than the configured one (a redirect?)",
                ));
            }
            let Some(auth) = self.auth else {
                return Err(git2::Error::from_str(
                    "the server asks for credentials and the app has no source.auth",
                ));
            };
            let user = user_from_url.or(auth.username.as_deref()).unwrap_or("git");
            if allowed.contains(CredentialType::USERNAME) {
                return Cred::username(user);
            }
            if given >= 1 {
                return Err(git2::Error::from_str("the credentials were refused"));
            }
            given += 1;
            if allowed.contains(CredentialType::SSH_KEY)
                && let Some(key) = &auth.ssh_key
            {
                return Cred::ssh_key_from_memory(user, None, key.expose_secret(), None);
            }
            if allowed.contains(CredentialType::USER_PASS_PLAINTEXT)
                && let Some(secret) = &auth.secret
            {
                let user = auth.username.as_deref().unwrap_or("git");
                return Cred::userpass_plaintext(user, secret.expose_secret());
            }
            Err(git2::Error::from_str(
                "source.auth has no credential of the kind the server asks for",
            ))
        });
        cb.certificate_check(move |cert, host| {
            // TLS certificates are checked by rustls in the http(s) transport (`http`); only
            // SSH host keys come here.
            let Some(hostkey) = cert.as_hostkey() else {
                return Ok(CertificateCheckStatus::CertificatePassthrough);
            };
            let Some(blob) = hostkey.hostkey() else {
                return Err(git2::Error::from_str("the SSH server offered no host key"));
            };
            let auth = self.auth.cloned().unwrap_or_default();
            if auth.insecure_skip_host_key_check {
                tracing::warn!(host, fingerprint = %fingerprint(blob), "SSH host key NOT CHECKED (insecureSkipHostKeyCheck: true): anyone between here and the server can pose as it");
                return Ok(CertificateCheckStatus::CertificateOk);
            }
            match check_known_host(
                auth.known_hosts.as_deref().unwrap_or(""),
                host,
                self.port,
                blob,
            ) {
                Ok(()) => Ok(CertificateCheckStatus::CertificateOk),
                Err(e) => {
                    *self.rejected.borrow_mut() = Some(e);
                    Err(git2::Error::from_str("host key rejected"))
                }
            }
        });
        cb
    }

    /// Lists the remote's refs (name, commit) and its default branch.
    ///
    /// # Errors
    ///
    /// As [`Session::classify`] says.
    fn list(&self, remote: &mut git2::Remote<'_>, url: &str) -> Result<RemoteRefs> {
        let conn = remote
            .connect_auth(Direction::Fetch, Some(self.callbacks()), None)
            .map_err(|e| self.classify(url, e))?;
        let heads = conn
            .list()
            .map_err(|e| self.classify(url, e))?
            .iter()
            .map(|h| (h.name().to_string(), h.oid()))
            .collect();
        let default_branch = conn
            .default_branch()
            .ok()
            .and_then(|b| b.as_str().ok().map(str::to_string));
        Ok((heads, default_branch))
    }

    /// Fetch options with these callbacks, no tags, no FETCH_HEAD, and with `shallow` a depth
    /// of 1 where the transport allows it (only the commits themselves are needed).
    fn fetch_options(&self, url: &str, shallow: bool) -> FetchOptions<'_> {
        let mut opts = FetchOptions::new();
        opts.remote_callbacks(self.callbacks());
        opts.download_tags(AutotagOption::None);
        opts.update_fetchhead(false);
        if shallow && shallow_ok(url) {
            opts.depth(1);
        }
        opts
    }

    /// Why `e` happened, as precisely as the callbacks allow.
    fn classify(&self, url: &str, e: git2::Error) -> Error {
        if let Some(rejected) = self.rejected.borrow_mut().take() {
            return rejected;
        }
        let message = e.message().to_string();
        let lower = message.to_ascii_lowercase();
        if e.code() == git2::ErrorCode::Auth
            || lower.contains("authentication")
            || lower.contains("credentials")
            || lower.contains("401")
            || lower.contains("403")
        {
            return Error::AuthenticationFailed {
                url: redact_url(url),
                message,
            };
        }
        // An answer the server gave (an HTTP status, another protocol): it was reached. Through
        // a response's read, libgit2 gets it in the network class (`source::http`).
        if lower.contains("unexpected http status")
            || lower.contains("not a smart http")
            || lower.contains("refusing a redirect")
        {
            return Error::FetchFailed {
                url: redact_url(url),
                source: e,
            };
        }
        if matches!(e.class(), git2::ErrorClass::Net | git2::ErrorClass::Os)
            || lower.contains("failed to connect")
            || lower.contains("connection refused")
            || lower.contains("could not resolve")
            || lower.contains("unexpected eof")
            || lower.contains("early eof")
        {
            return Error::Unreachable {
                url: redact_url(url),
                source: e,
            };
        }
        Error::FetchFailed {
            url: redact_url(url),
            source: e,
        }
    }
}

/// The SSH keys allowed to sign commits: `allowed_signers` as `ssh-keygen -Y verify` reads it
/// (`principals [options] keytype base64 [comment]`, e.g. `alice@example.com ssh-ed25519
/// AAAA...`). Certificate authorities (`cert-authority`) and other namespaces than `git`
/// (`namespaces="..."`) are not trusted. Ed25519 keys are verified (crate `ssh-key`).
#[derive(Clone, Debug, Default)]
pub struct AllowedSigners {
    keys: Vec<(String, ssh_key::PublicKey)>,
}

impl AllowedSigners {
    /// Parses allowed_signers text.
    ///
    /// # Errors
    ///
    /// `line N: ...` for a line whose key cannot be read.
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let mut keys = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            // The first field is the principals, whatever it looks like.
            let Some(kind_at) = fields
                .iter()
                .skip(1)
                .position(|f| {
                    f.starts_with("ssh-") || f.starts_with("ecdsa-") || f.starts_with("sk-")
                })
                .map(|p| p + 1)
            else {
                return Err(format!(
                    "line {}: expected `principals [options] keytype key`",
                    i + 1
                ));
            };
            // Option names are case-insensitive, as ssh-keygen reads them.
            let options = fields[1..kind_at].join(" ").to_ascii_lowercase();
            if options.contains("valid-after") || options.contains("valid-before") {
                return Err(format!(
                    "line {}: valid-after and valid-before are not supported; remove the key or the option",
                    i + 1
                ));
            }
            if options.contains("cert-authority") {
                continue;
            }
            if let Some(ns) = options.split("namespaces=\"").nth(1)
                && !ns
                    .split('"')
                    .next()
                    .unwrap_or("")
                    .split(',')
                    .any(|n| n == "git")
            {
                continue;
            }
            let Some(b64) = fields.get(kind_at + 1) else {
                return Err(format!("line {}: the key is missing", i + 1));
            };
            let key = ssh_key::PublicKey::from_openssh(&format!("{} {b64}", fields[kind_at]))
                .map_err(|e| format!("line {}: {e}", i + 1))?;
            keys.push((fields[0].to_string(), key));
        }
        Ok(Self { keys })
    }

    /// How many keys are trusted.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when no key is trusted.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The principal whose key made `signature` (an armored `SSH SIGNATURE`) over `payload`.
    fn verify(&self, payload: &[u8], signature: &str) -> std::result::Result<String, String> {
        let sig = ssh_key::SshSig::from_pem(signature.trim())
            .map_err(|e| format!("carries an unreadable SSH signature: {e}"))?;
        if sig.namespace() != "git" {
            return Err(format!(
                "is signed for namespace `{}`, not `git`",
                sig.namespace()
            ));
        }
        for (principal, key) in &self.keys {
            if key.key_data() == sig.public_key() && key.verify("git", payload, &sig).is_ok() {
                return Ok(principal.clone());
            }
        }
        let signer = ssh_key::PublicKey::from(sig.public_key().clone())
            .fingerprint(ssh_key::HashAlg::Sha256);
        Err(format!(
            "is signed by a key that is not in allowedSigners, or the signature does not match ({signer})"
        ))
    }
}

/// The OpenPGP public keys allowed to sign commits (armored blocks, as `gpg --armor --export`
/// writes them; subkeys included). Verified with the `pgp` crate (rPGP). Key expiry and
/// revocation are not checked.
#[derive(Clone, Debug, Default)]
pub struct OpenPgpKeys {
    keys: Vec<pgp::SignedPublicKey>,
}

impl OpenPgpKeys {
    /// Parses armored public keys.
    ///
    /// # Errors
    ///
    /// A message when the text holds no readable key, or a key whose self-signatures do not
    /// verify.
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        use pgp::Deserializable as _;
        let (keys, _) =
            pgp::SignedPublicKey::from_armor_many(std::io::Cursor::new(text.as_bytes()))
                .map_err(|e| format!("cannot read the OpenPGP keys: {e}"))?;
        let mut out = Vec::new();
        for key in keys {
            let key = key.map_err(|e| format!("cannot read an OpenPGP key: {e}"))?;
            key.verify()
                .map_err(|e| format!("an OpenPGP key's self-signature does not verify: {e}"))?;
            out.push(key);
        }
        if out.is_empty() {
            return Err("no OpenPGP public key found".into());
        }
        Ok(Self { keys: out })
    }

    /// How many keys are trusted.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when no key is trusted.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The fingerprint (hex) of the key whose primary key or subkey made `signature` (an
    /// armored `PGP SIGNATURE`) over `payload`.
    fn verify(&self, payload: &[u8], signature: &str) -> std::result::Result<String, String> {
        use pgp::Deserializable as _;
        use pgp::types::PublicKeyTrait as _;
        let (sig, _) = pgp::StandaloneSignature::from_string(signature.trim())
            .map_err(|e| format!("carries an unreadable OpenPGP signature: {e}"))?;
        for key in &self.keys {
            let hex = |f: &[u8]| f.iter().map(|b| format!("{b:02X}")).collect::<String>();
            if sig.verify(key, payload).is_ok() {
                return Ok(hex(key.fingerprint().as_bytes()));
            }
            for sub in &key.public_subkeys {
                if sig.verify(&sub.key, payload).is_ok() {
                    return Ok(hex(key.fingerprint().as_bytes()));
                }
            }
        }
        Err("is signed by an OpenPGP key that is not in openpgpKeys, or the signature does not match".into())
    }
}

/// Whom a commit must be signed by (`source.verify`): SSH keys, OpenPGP keys, or both.
#[derive(Clone, Debug, Default)]
pub struct Trust {
    /// SSH signers.
    pub ssh: AllowedSigners,
    /// OpenPGP keys.
    pub openpgp: OpenPgpKeys,
}

impl Trust {
    fn verify(&self, payload: &[u8], signature: &str) -> std::result::Result<String, String> {
        let signature = signature.trim();
        if signature.starts_with("-----BEGIN SSH SIGNATURE-----") {
            if self.ssh.is_empty() {
                return Err("is signed with SSH, and source.verify has no allowedSigners".into());
            }
            self.ssh.verify(payload, signature)
        } else if signature.starts_with("-----BEGIN PGP SIGNATURE-----") {
            if self.openpgp.is_empty() {
                return Err("is signed with OpenPGP, and source.verify has no openpgpKeys".into());
            }
            self.openpgp.verify(payload, signature)
        } else {
            Err("carries a signature of an unknown kind (not SSH, not OpenPGP)".into())
        }
    }
}

/// How long a connection to a Git server is waited for, in milliseconds: libgit2's (ssh,
/// `git://`) and the http(s) transport's ([`http`]).
pub const CONNECT_TIMEOUT_MS: i32 = 30_000;
/// How long a silent Git server connection is waited on (each read or write), in
/// milliseconds: libgit2's and the http(s) transport's.
pub const SOCKET_TIMEOUT_MS: i32 = 60_000;
/// Default timeout of a whole fetch (Flux's `GitRepository` `spec.timeout` default).
pub const DEFAULT_FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Sets libgit2's process-wide timeouts on Git server connections ([`CONNECT_TIMEOUT_MS`],
/// [`SOCKET_TIMEOUT_MS`]), so that a server that accepts a connection and then says nothing
/// cannot hold a fetch thread forever (libgit2 waits indefinitely by default).
///
/// # Safety
///
/// Changes libgit2 globals without synchronization: call it before any thread uses git2.
pub unsafe fn set_socket_timeouts() {
    // SAFETY: the caller guarantees no other thread uses git2 yet.
    unsafe {
        let _ = git2::opts::set_server_connect_timeout_in_milliseconds(CONNECT_TIMEOUT_MS);
        let _ = git2::opts::set_server_timeout_in_milliseconds(SOCKET_TIMEOUT_MS);
    }
}

/// Sets the socket timeouts ([`set_socket_timeouts`]) once, before the first repository is
/// opened, and registers the http(s) transport ([`http`]): every open of a repository goes
/// through here and waits for it, so no thread uses git2 before they are set. The first call
/// also initializes libgit2 (the CLI starts it on a thread of its own at startup, beside
/// reading the config and opening the store).
pub fn git_ready() {
    static READY: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    READY.get_or_init(|| {
        // SAFETY: every use of git2 starts with opening a repository, and every open waits
        // here until this has run.
        // Objects are not hashed again at each read, as git reads them (`git fsck` checks):
        // the cache's packs were checked when fetched (libgit2's indexer hashes every object),
        // and a damaged object still fails its zlib checksum (Adler-32), which is what
        // [`damages_cache`] looks for. Hashing was a sixth of reading a revision's blobs.
        git2::opts::strict_hash_verification(false);
        unsafe {
            set_socket_timeouts();
            if let Err(e) = http::register() {
                tracing::error!(error = %e, "the HTTP transport for Git did not register: http(s) sources cannot be fetched");
            }
        }
    });
}

/// A cache of bare repositories, one per URL.
#[derive(Clone, Debug)]
pub struct GitCache {
    dir: PathBuf,
    locks: Arc<Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>>,
    /// Credentials and host keys by repository URL.
    auth: Arc<Mutex<HashMap<String, Arc<Auth>>>>,
    /// Fetch requests gathered per repository cache.
    gather: Arc<Mutex<HashMap<PathBuf, Arc<Mutex<Gather>>>>>,
    /// Transfers started (each one listing of a remote, and one fetch when something is new).
    transfers: Arc<std::sync::atomic::AtomicU64>,
    /// Helm chart repositories (`source.helm.chart`), cached in `<dir>/charts`.
    charts: Arc<charts::ChartCache>,
}

/// How long a fetch waits for other apps of the same repository asking at the same moment
/// (a webhook triggers them all, they all start together), so that one fetch serves them.
pub const GATHER: std::time::Duration = std::time::Duration::from_millis(20);

/// True when `e` says the cache's own files are damaged, so that it is discarded and cloned
/// again at the next fetch ([`discard_damaged_cache`]): an object that cannot be read or
/// inflated, or a ref file of the cache that does not parse (libgit2: "corrupted loose
/// reference file", "corrupted packed references file"). A ref that is simply missing is not.
fn damages_cache(e: &git2::Error) -> bool {
    match e.class() {
        git2::ErrorClass::Odb | git2::ErrorClass::Zlib => true,
        git2::ErrorClass::Reference => e.message().starts_with("corrupted"),
        _ => false,
    }
}

/// True when `reference` is a commit id, or one with an ancestry suffix (`<id>~3`, `<id>^2`) as
/// `git rev-parse` takes it: fetched by id, never gathered with other refs.
fn names_commit(reference: &str) -> bool {
    !reference.starts_with("refs/")
        && looks_like_commit_id(reference.split(['~', '^']).next().unwrap_or(reference))
}

/// The refs asked of one repository cache, and the last fetch's results.
#[derive(Debug, Default)]
struct Gather {
    /// Refs asked for and not yet taken by a fetch.
    wanted: std::collections::BTreeSet<Option<String>>,
    /// Every ref ever asked of this cache: with only one, there is nobody to gather.
    known: std::collections::BTreeSet<Option<String>>,
    /// When the last fetch listed the remote, and what it found per ref.
    done: Option<(std::time::Instant, HashMap<Option<String>, Fetched>)>,
    /// Apps that said they read this repository ([`GitCache::expect`]).
    readers: usize,
    /// Requests made so far.
    asked: u64,
}

impl Gather {
    /// Notes a request for `reference`; true when its fetch, if it leads, should wait
    /// [`GATHER`] for others: the repository is read at several refs, or this is its first
    /// fetch and other apps may ask with it (more than one app said it reads the repository,
    /// or nobody said: [`GitCache::expect`]).
    fn ask(&mut self, reference: Option<String>) -> bool {
        self.wanted.insert(reference.clone());
        let first = self.done.is_none() && self.asked == 0;
        self.asked += 1;
        self.known.insert(reference);
        (first && self.readers != 1) || self.known.len() > 1
    }

    /// The result for `reference` of a fetch that listed the remote after `asked`.
    fn done_since(&self, asked: std::time::Instant, reference: &Option<String>) -> Option<Fetched> {
        let (listed, results) = self.done.as_ref()?;
        if *listed < asked {
            return None;
        }
        results.get(reference).map(|f| Fetched {
            received_objects: 0,
            ..f.clone()
        })
    }
}

impl GitCache {
    /// A cache rooted at `dir` (created on first fetch).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        Self {
            charts: Arc::new(charts::ChartCache::new(dir.join("charts"))),
            dir,
            locks: Arc::default(),
            auth: Arc::default(),
            gather: Arc::default(),
            transfers: Arc::default(),
        }
    }

    /// The chart repositories' cache, beside the repositories'.
    pub fn charts(&self) -> &charts::ChartCache {
        &self.charts
    }

    /// Authenticates every fetch of `url` with `auth` (and checks SSH host keys with it).
    pub fn set_auth(&self, url: &str, auth: Auth) {
        self.auth
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(url.to_string(), Arc::new(auth));
    }

    fn auth_for(&self, url: &str) -> Option<Arc<Auth>> {
        self.auth
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(url)
            .cloned()
    }

    /// Where the bare repository for `url` lives: `<dir>/repos/<last path segment>-<hash>.git`.
    pub fn repo_path(&self, url: &str) -> PathBuf {
        let digest = Sha256::digest(url.as_bytes());
        let hash: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
        // The folder's name shows the repository's, never its credentials or a query (which
        // may hold a token).
        let shown = redact_url(url);
        let name: String = shown
            .split(['?', '#'])
            .next()
            .unwrap_or(&shown)
            .trim_end_matches('/')
            .trim_end_matches(".git")
            .rsplit(['/', ':', '\\'])
            .next()
            .unwrap_or("repo")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .take(40)
            .collect();
        self.dir.join("repos").join(format!("{name}-{hash}.git"))
    }

    fn lock_for(&self, path: &Path) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(path.to_path_buf()).or_default().clone()
    }

    /// Fetches `reference` (a branch, tag, full ref name or commit id; `None` for the remote's
    /// HEAD) from `url` into the cache and returns the commit it points at.
    ///
    /// # Errors
    ///
    /// [`Error::CacheFailed`], [`Error::FetchFailed`] (the remote could not be listed or
    /// fetched), [`Error::RefNotFound`], [`Error::TaskFailed`]. On error the cache keeps what it
    /// had: the last good revision can still be read.
    pub async fn fetch(&self, url: &str, reference: Option<&str>) -> Result<Fetched> {
        self.fetch_within(url, reference, DEFAULT_FETCH_TIMEOUT)
            .await
    }

    /// [`GitCache::fetch`] bounded by `timeout` (waiting for the cache's lock included).
    ///
    /// # Errors
    ///
    /// As [`GitCache::fetch`], and [`Error::TimedOut`]. After a timeout the transfer is
    /// aborted at its next progress callback, and the cache stays locked until it has stopped,
    /// so two fetches never write one cache at once.
    pub async fn fetch_within(
        &self,
        url: &str,
        reference: Option<&str>,
        timeout: std::time::Duration,
    ) -> Result<Fetched> {
        let path = self.repo_path(url);
        let lock = self.lock_for(&path);
        let auth = self.auth_for(url);
        let cancel = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reference = reference.map(str::to_string);
        let by_id = reference.as_deref().is_some_and(names_commit);
        let asked = std::time::Instant::now();
        let gather = self.gather_for(&path);
        // Other refs of this repository are asked for too (apps on other branches), or it is
        // the first fetch of it: a fetch waits [`GATHER`] for them. Later requests for one
        // ref need no wait: whoever asks while a fetch lists the remote is served by the next
        // one, which takes them all.
        let others = !by_id
            && gather
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .ask(reference.clone());
        let transfers = self.transfers.clone();
        let task = {
            let cancel = cancel.clone();
            let url = url.to_string();
            async move {
                let guard = lock.lock_owned().await;
                let span = tracing::info_span!("git_fetch", url = %redact_url(&url));
                if by_id {
                    transfers.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let id = reference.unwrap_or_default();
                    return tokio::task::spawn_blocking(move || {
                        let _guard = guard;
                        let _span = span.entered();
                        fetch_commit_blocking(&path, &url, &id, auth.as_deref(), &cancel)
                    })
                    .await
                    .map_err(Error::TaskFailed)?;
                }
                // A fetch that listed the remote after this request was made saw everything
                // this one would: its result is shared (one fetch per repository for the apps
                // that asked together).
                if let Some(f) = gather
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .done_since(asked, &reference)
                {
                    tracing::debug!(parent: &span, "Fetch shared with another app of the same repository");
                    return Ok(f);
                }
                // Lead: let the apps asking at the same moment join, then fetch every ref asked
                // for in one listing and one transfer.
                if others {
                    tokio::time::sleep(GATHER).await;
                }
                let refs: Vec<Option<String>> = {
                    let mut g = gather.lock().unwrap_or_else(|e| e.into_inner());
                    let mut refs: Vec<Option<String>> =
                        std::mem::take(&mut g.wanted).into_iter().collect();
                    if !refs.contains(&reference) {
                        refs.push(reference.clone());
                    }
                    refs
                };
                let listed = std::time::Instant::now();
                transfers.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let shown = redact_url(&url);
                let shared = gather.clone();
                let mine = reference.clone();
                let mine = tokio::task::spawn_blocking(move || {
                    let _guard = guard;
                    let _span = span.entered();
                    let results = fetch_refs_blocking(&path, &url, &refs, auth.as_deref(), &cancel);
                    // The cache's own objects failed it (a truncated pack: the fetch reads
                    // them to tell the remote what it has): it is cloned again next time.
                    if let Err(Error::FetchFailed { source, .. }) = &results
                        && damages_cache(source)
                    {
                        discard_damaged_cache(&path);
                    }
                    let results = results?;
                    // Shared before the cache's lock is released, so that whoever takes it
                    // next finds the results.
                    let mut g = shared.lock().unwrap_or_else(|e| e.into_inner());
                    let mut done = HashMap::new();
                    let mut found = None;
                    for (r, result) in results {
                        if let Ok(f) = &result {
                            done.insert(r.clone(), f.clone());
                        }
                        if r == mine {
                            found = Some(result);
                        }
                    }
                    g.done = Some((listed, done));
                    Ok(found)
                })
                .await
                .map_err(Error::TaskFailed)??;
                mine.unwrap_or_else(|| {
                    Err(Error::RefNotFound {
                        reference: reference.unwrap_or_else(|| "HEAD".into()),
                        url: shown,
                    })
                })
            }
        };
        match tokio::time::timeout(timeout, task).await {
            Ok(result) => result,
            Err(_) => {
                cancel.store(true, std::sync::atomic::Ordering::Relaxed);
                Err(Error::TimedOut {
                    url: redact_url(url),
                    seconds: timeout.as_secs(),
                })
            }
        }
    }

    /// How many transfers with remotes this cache started (fetches shared by several
    /// requests count once).
    pub fn transfers(&self) -> u64 {
        self.transfers.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Tells the cache that one app reads `reference` of `url` (called as each app is loaded,
    /// before any fetch). The first fetch of a repository waits [`GATHER`] so that the apps
    /// asking with it share it; when only one app said it reads the repository, at one ref,
    /// nobody can join and it is fetched at once (a one-shot `driftless sync` of one app saves
    /// the wait). Commit ids are fetched by id, never gathered.
    pub fn expect(&self, url: &str, reference: Option<&str>) {
        let gather = self.gather_for(&self.repo_path(url));
        let mut g = gather.lock().unwrap_or_else(|e| e.into_inner());
        g.readers += 1;
        if !reference.is_some_and(names_commit) {
            g.known.insert(reference.map(str::to_string));
        }
    }

    fn gather_for(&self, path: &Path) -> Arc<Mutex<Gather>> {
        let mut g = self.gather.lock().unwrap_or_else(|e| e.into_inner());
        g.entry(path.to_path_buf()).or_default().clone()
    }

    /// Fetches every remote ref whose full name `matches` accepts (the pull requests of a
    /// preview glob) into the cache under `refs/driftless/preview/`, forgets the cached ones
    /// the remote no longer has, and returns them with their head commits, sorted by name. An
    /// empty list means the remote was listed and has none.
    ///
    /// # Errors
    ///
    /// As [`GitCache::fetch_within`] (without [`Error::RefNotFound`]). On error nothing is
    /// forgotten: a listing that failed never says that a ref is gone.
    pub async fn fetch_matching(
        &self,
        url: &str,
        matches: Arc<dyn Fn(&str) -> bool + Send + Sync>,
        timeout: std::time::Duration,
    ) -> Result<Vec<RemoteHead>> {
        let path = self.repo_path(url);
        let lock = self.lock_for(&path);
        let auth = self.auth_for(url);
        let cancel = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = {
            let cancel = cancel.clone();
            let url = url.to_string();
            async move {
                let guard = lock.lock_owned().await;
                let span = tracing::info_span!("git_fetch_previews", url = %redact_url(&url));
                tokio::task::spawn_blocking(move || {
                    let _guard = guard;
                    let _span = span.entered();
                    fetch_matching_blocking(&path, &url, matches.as_ref(), auth.as_deref(), &cancel)
                })
                .await
                .map_err(Error::TaskFailed)?
            }
        };
        match tokio::time::timeout(timeout, task).await {
            Ok(result) => result,
            Err(_) => {
                cancel.store(true, std::sync::atomic::Ordering::Relaxed);
                Err(Error::TimedOut {
                    url: redact_url(url),
                    seconds: timeout.as_secs(),
                })
            }
        }
    }

    /// Checks that `revision` (fetched from `url`) is signed by one of `signers` (SSH or
    /// OpenPGP, by the signature's kind), as Flux's
    /// `verify: {mode: HEAD}` does. Returns the signer's principal.
    ///
    /// # Errors
    ///
    /// [`Error::SignatureRejected`] for an unsigned commit or one no allowed key signed;
    /// [`Error::CacheFailed`], [`Error::TaskFailed`].
    pub async fn verify(
        &self,
        url: &str,
        revision: &Revision,
        signers: Arc<Trust>,
    ) -> Result<String> {
        let repo_path = self.repo_path(url);
        let revision = revision.clone();
        tokio::task::spawn_blocking(move || {
            let repo = open_cache(&repo_path)?;
            let rejected = |reason: String| Error::SignatureRejected {
                revision: revision.0.clone(),
                reason,
            };
            let oid =
                Oid::from_str(&revision.0).map_err(|_| rejected("is not a commit id".into()))?;
            let (signature, payload) = match repo.extract_signature(&oid, None) {
                Ok(pair) => pair,
                Err(e) if e.code() == git2::ErrorCode::NotFound => {
                    return Err(rejected("is not signed".into()));
                }
                Err(e) => return Err(rejected(format!("cannot be read: {}", e.message()))),
            };
            let signature = String::from_utf8_lossy(&signature).to_string();
            signers.verify(&payload, &signature).map_err(rejected)
        })
        .await
        .map_err(Error::TaskFailed)?
    }

    /// Reads the manifest files under `path` (empty or `.` for the root) at `revision` from the
    /// cache of `url`. The revision must have been fetched. A walk past `limits`, or a submodule
    /// under `path`, stops with an error in [`Files::diagnostics`] (the revision must not be
    /// applied).
    ///
    /// # Errors
    ///
    /// [`Error::PathNotFound`] when `path` is not a folder at that revision,
    /// [`Error::ReadFailed`], [`Error::CacheFailed`], [`Error::TaskFailed`].
    pub async fn read(
        &self,
        url: &str,
        revision: &Revision,
        path: &str,
        limits: Limits,
    ) -> Result<Files> {
        self.read_selected(url, revision, path, limits, manifest::is_manifest_path)
            .await
    }

    /// As [`GitCache::read`], reading the files `wants` selects by path instead of the plain
    /// manifests (the render stage's `Renderer::selector`): the walker still
    /// checks every entry (symlinks, submodules, limits), and reads only those files.
    ///
    /// # Errors
    ///
    /// As [`GitCache::read`].
    pub async fn read_selected(
        &self,
        url: &str,
        revision: &Revision,
        path: &str,
        limits: Limits,
        wants: fn(&str) -> bool,
    ) -> Result<Files> {
        self.walk(url, revision, path, limits, wants, false).await
    }

    /// As [`GitCache::read_selected`], listing the files `wants` selects without reading them
    /// ([`Files::unread`]: each one's path and blob id, its size counted against `limits`
    /// from the object's header): a caller that finds it has parsed these blobs before, or
    /// needs none of them, reads nothing more; else [`GitCache::read_contents`].
    ///
    /// # Errors
    ///
    /// As [`GitCache::read`].
    pub async fn read_listed(
        &self,
        url: &str,
        revision: &Revision,
        path: &str,
        limits: Limits,
        wants: fn(&str) -> bool,
    ) -> Result<Files> {
        self.walk(url, revision, path, limits, wants, true).await
    }

    /// Reads the contents of the files of `files` ([`GitCache::read_listed`] from `url`'s
    /// cache) whose paths are in `paths`, by their blob ids; the others stay empty.
    /// [`Files::unread`] is cleared.
    ///
    /// # Errors
    ///
    /// [`Error::ReadFailed`] when a blob cannot be read (a damaged cache is then dropped, to be
    /// cloned again by the next fetch, as [`GitCache::read`] does), [`Error::CacheFailed`],
    /// [`Error::TaskFailed`].
    pub async fn read_contents(
        &self,
        url: &str,
        mut files: Files,
        paths: HashSet<String>,
    ) -> Result<Files> {
        let repo_path = self.repo_path(url);
        let span = tracing::debug_span!("git_read_contents", files = paths.len());
        tokio::task::spawn_blocking(move || {
            let _span = span.entered();
            let mut wanted: Vec<(&String, &mut Vec<u8>)> = files
                .files
                .iter_mut()
                .filter(|(p, _)| paths.contains(p.as_str()))
                .map(|(p, c)| (&*p, c))
                .collect();
            let ids = &files.blob_ids;
            let read = wanted
                .iter()
                .map(|(path, _)| {
                    let id = ids.get(path.as_str()).map_or("", String::as_str);
                    Oid::from_str(id)
                        .map(|oid| (path.as_str(), oid))
                        .map_err(|source| Error::ReadFailed {
                            what: format!("file {path}"),
                            source,
                        })
                })
                .collect::<Result<Vec<_>>>()
                .and_then(|blobs| read_blobs(&open_cache(&repo_path)?, &blobs, u64::MAX))
                .map(|read| {
                    for ((_, contents), blob) in wanted.iter_mut().zip(read) {
                        **contents = blob.unwrap_or_default();
                    }
                });
            if let Err(Error::ReadFailed { source, .. }) = &read
                && damages_cache(source)
            {
                discard_damaged_cache(&repo_path);
            }
            read?;
            files.unread = false;
            Ok(files)
        })
        .await
        .map_err(Error::TaskFailed)?
    }

    async fn walk(
        &self,
        url: &str,
        revision: &Revision,
        path: &str,
        limits: Limits,
        wants: fn(&str) -> bool,
        list_only: bool,
    ) -> Result<Files> {
        let repo_path = self.repo_path(url);
        let revision = revision.clone();
        let path = path.to_string();
        let span = tracing::debug_span!("git_read", revision = %revision.short(), path = %path);
        tokio::task::spawn_blocking(move || {
            let _span = span.entered();
            let repo = open_cache(&repo_path)?;
            let read = read_files(&repo, &revision, &path, limits, wants, list_only);
            if let Err(Error::ReadFailed { source, .. }) = &read
                && damages_cache(source)
            {
                drop(repo);
                discard_damaged_cache(&repo_path);
            }
            read
        })
        .await
        .map_err(Error::TaskFailed)?
    }
}

/// Opens the bare cache at `path` for reading ([`Error::CacheFailed`] when it cannot be).
fn open_cache(path: &Path) -> Result<Repository> {
    git_ready();
    Repository::open_bare(path).map_err(|source| Error::CacheFailed {
        path: path.to_path_buf(),
        source,
    })
}

/// Blobs read on each thread at least: fewer are read on the calling thread alone.
const BLOBS_PER_THREAD: usize = 64;

/// Reads the blobs `blobs` (path, for errors, and id) of the cache `repo`, in as many parts as
/// there are cores (at least [`BLOBS_PER_THREAD`] each): the first on the calling thread
/// through `repo`, each other on a thread of its own through its own handle on the cache (a
/// git2 repository is not shared between threads). Each blob's inflating and hashing is the
/// cost. Once `budget` bytes are read in all, the parts read no more: the blobs not read are
/// `None`. The contents come back in the order of `blobs`.
///
/// # Errors
///
/// [`Error::ReadFailed`] when a blob cannot be read, [`Error::CacheFailed`] when the cache
/// cannot be opened or a thread cannot be started.
fn read_blobs(
    repo: &Repository,
    blobs: &[(&str, Oid)],
    budget: u64,
) -> Result<Vec<Option<Vec<u8>>>> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let read = AtomicU64::new(0);
    let read_part = |repo: &Repository, part: &[(&str, Oid)]| -> Result<Vec<Option<Vec<u8>>>> {
        let mut out = Vec::with_capacity(part.len());
        for (path, oid) in part {
            if read.load(Ordering::Relaxed) > budget {
                out.push(None);
                continue;
            }
            let blob = repo.find_blob(*oid).map_err(|source| Error::ReadFailed {
                what: format!("file {path}"),
                source,
            })?;
            read.fetch_add(blob.size() as u64, Ordering::Relaxed);
            out.push(Some(blob.content().to_vec()));
        }
        Ok(out)
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = blobs.len().div_ceil(threads).max(BLOBS_PER_THREAD);
    if blobs.len() <= chunk {
        return read_part(repo, blobs);
    }
    let (first, rest) = blobs.split_at(chunk);
    let repo_path = repo.path();
    std::thread::scope(|scope| {
        let parent = tracing::Span::current();
        let handles: Vec<_> = rest
            .chunks(chunk)
            .enumerate()
            .map(|(i, part)| {
                let parent = parent.clone();
                let read_part = &read_part;
                std::thread::Builder::new()
                    .name("git-read".into())
                    .spawn_scoped(scope, move || {
                        let _span =
                            tracing::debug_span!(parent: &parent, "git_read_part", part = i + 1)
                                .entered();
                        read_part(&open_cache(repo_path)?, part)
                    })
            })
            .collect();
        let mut out = Vec::with_capacity(blobs.len());
        out.extend(read_part(repo, first)?);
        for h in handles {
            let part = h
                .map_err(|e| Error::CacheFailed {
                    path: repo_path.to_path_buf(),
                    source: git2::Error::from_str(&format!("cannot start a reading thread: {e}")),
                })?
                .join()
                .unwrap_or_else(|e| std::panic::resume_unwind(e))?;
            out.extend(part);
        }
        Ok(out)
    })
}

/// Takes the cache of one repository for a fetch, against other processes too (`driftless
/// sync` beside the agent, or two of them): an exclusive `flock` on `<path>.fetch-lock`, held
/// until the returned file is dropped. Two processes fetching into one cache at once would
/// otherwise fail on each other's ref lock files. Waits in steps of 20 ms until it is free or
/// `cancel` is set (the fetch timed out).
fn lock_cache(path: &Path, cancel: &std::sync::atomic::AtomicBool) -> Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let failed = |e: std::io::Error| Error::CacheFailed {
        path: path.to_path_buf(),
        source: git2::Error::from_str(&format!("cannot lock the cache: {e}")),
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(failed)?;
    }
    let mut name = path.as_os_str().to_owned();
    name.push(".fetch-lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(PathBuf::from(name))
        .map_err(failed)?;
    loop {
        // SAFETY: flock on a file descriptor this function owns; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(file);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::WouldBlock {
            return Err(failed(e));
        }
        if cancel.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(failed(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "another process held it until the fetch timed out",
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Removes the cache at `path` after its object database failed to give an object of a
/// fetched revision (a truncated pack, an interrupted `git gc`, disk damage): it is only a
/// cache, and the next fetch clones again into a fresh one. Taken under the fetch lock, and
/// moved aside in one step first, so that no other process reads a half-removed cache.
fn discard_damaged_cache(path: &Path) {
    let cancel = std::sync::atomic::AtomicBool::new(false);
    let Ok(_lock) = lock_cache(path, &cancel) else {
        return;
    };
    let aside = path.with_extension(format!(
        "damaged-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    match std::fs::rename(path, &aside) {
        Ok(()) => {
            tracing::warn!(cache = %path.display(), "The repository cache is damaged; it is removed and cloned again at the next fetch");
            let _ = std::fs::remove_dir_all(&aside);
        }
        Err(e) => {
            tracing::warn!(cache = %path.display(), error = %e, "The repository cache is damaged and cannot be moved aside");
        }
    }
}

/// Opens the bare cache at `path`, creating it first when it does not exist. Creation is safe
/// against another process (a second `driftless sync`) doing the same at once: the repository
/// is made in a private folder beside `path` and renamed into place in one step, so `path` is
/// either absent or a whole repository; whoever loses the rename opens the winner's.
fn open_or_init(path: &Path) -> Result<Repository> {
    let cache_failed = |source| Error::CacheFailed {
        path: path.to_path_buf(),
        source,
    };
    let io_failed = |e: std::io::Error| cache_failed(git2::Error::from_str(&e.to_string()));
    git_ready();
    if path.exists() {
        return Repository::open_bare(path).map_err(cache_failed);
    }
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io_failed)?;
    let name = path
        .file_name()
        .map_or_else(|| "repo".to_string(), |n| n.to_string_lossy().into_owned());
    let staging = parent.join(format!(
        ".{name}.init-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    let made = Repository::init_bare(&staging).map_err(cache_failed);
    let renamed = made.and_then(|_| std::fs::rename(&staging, path).map_err(io_failed));
    if renamed.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
        // Another process's repository took the place first: use it.
        if !path.join("HEAD").exists() {
            renamed?;
        }
    }
    Repository::open_bare(path).map_err(cache_failed)
}

fn looks_like_commit_id(s: &str) -> bool {
    (7..=64).contains(&s.len()) && s.chars().all(|c| c.is_ascii_hexdigit())
}

/// Fetches `references` (each a branch, tag, full ref or `None` for the remote's HEAD) in one
/// listing and one transfer. The outer error is the connection's (it concerns every ref); a ref
/// the remote does not have is its own [`Error::RefNotFound`].
fn fetch_refs_blocking(
    path: &Path,
    url: &str,
    references: &[Option<String>],
    auth: Option<&Auth>,
    cancel: &Arc<std::sync::atomic::AtomicBool>,
) -> Result<Vec<(Option<String>, Result<Fetched>)>> {
    let _cache_lock = lock_cache(path, cancel)?;
    let repo = open_or_init(path)?;
    let session = Session::new(url, auth, cancel);
    let fetch_failed = |source| session.classify(url, source);
    ensure_local_exists(url)?;
    let mut remote = repo.remote_anonymous(url).map_err(fetch_failed)?;
    let (heads, default_branch) = session.list(&mut remote, url)?;
    let has = |name: &str| heads.iter().any(|(n, _)| n == name);
    // The remote ref each reference names.
    let resolve = |reference: Option<&str>| -> Option<String> {
        match reference {
            None | Some("HEAD") => default_branch.clone().filter(|b| has(b)),
            Some(r) if r.starts_with("refs/") => has(r).then(|| r.to_string()),
            Some(r) => {
                let branch = format!("refs/heads/{r}");
                let tag = format!("refs/tags/{r}");
                if has(&branch) {
                    Some(branch)
                } else if has(&tag) {
                    Some(tag)
                } else {
                    None
                }
            }
        }
    };
    let resolved: Vec<(Option<String>, Option<String>)> = references
        .iter()
        .map(|r| (r.clone(), resolve(r.as_deref())))
        .collect();
    let mut names: Vec<String> = resolved.iter().filter_map(|(_, n)| n.clone()).collect();
    names.sort();
    names.dedup();
    let before: HashMap<String, Option<Oid>> = names
        .iter()
        .map(|n| (n.clone(), repo.refname_to_id(&local_ref(n)).ok()))
        .collect();
    let mut received_objects = 0;
    // Refs whose listed commit the cache's ref already names need no transfer: a poll that
    // finds nothing new is one listing.
    let listed = |name: &String| heads.iter().find(|(n, _)| n == name).map(|(_, id)| *id);
    let moved: Vec<&String> = names
        .iter()
        .filter(|n| listed(n) != before.get(*n).copied().flatten())
        .collect();
    if !moved.is_empty() {
        match local_objects(url) {
            // A repository on this machine: its objects are read where they are (an
            // alternate of the cache, as `git clone --shared` does), and only the refs move:
            // no pack is built, compressed and indexed for a copy of what is on the same disk.
            Some(objects) => {
                share_objects(&repo, &objects).map_err(fetch_failed)?;
                for name in &moved {
                    if let Some(id) = listed(name) {
                        repo.reference(&local_ref(name), id, true, "driftless: fetch")
                            .map_err(fetch_failed)?;
                    }
                }
            }
            None => {
                let specs: Vec<String> = moved
                    .iter()
                    .map(|n| format!("+{n}:{}", local_ref(n)))
                    .collect();
                let specs: Vec<&str> = specs.iter().map(String::as_str).collect();
                let mut opts = session.fetch_options(url, true);
                remote
                    .fetch(&specs, Some(&mut opts), None)
                    .map_err(fetch_failed)?;
                received_objects = remote.stats().received_objects();
            }
        }
    }
    let mut out = Vec::new();
    for (reference, name) in resolved {
        let result = match name {
            None => Err(Error::RefNotFound {
                reference: reference.clone().unwrap_or_else(|| "HEAD".into()),
                url: redact_url(url),
            }),
            Some(name) => repo
                .find_reference(&local_ref(&name))
                .and_then(|r| r.peel_to_commit())
                .map_err(|source| Error::ReadFailed {
                    what: format!("ref {name}"),
                    source,
                })
                .map(|commit| {
                    let previous = before
                        .get(&name)
                        .copied()
                        .flatten()
                        .filter(|b| *b != commit.id());
                    // A shallow cache lacks the history to tell; then this says false.
                    let rewritten = previous.is_some_and(|old| {
                        repo.find_commit(old).is_ok()
                            && !repo.is_shallow()
                            && !repo.graph_descendant_of(commit.id(), old).unwrap_or(true)
                    });
                    Fetched {
                        revision: Revision(commit.id().to_string()),
                        resolved_ref: name,
                        received_objects,
                        previous: previous.map(|o| Revision(o.to_string())),
                        rewritten,
                    }
                }),
        };
        out.push((reference, result));
    }
    Ok(out)
}

/// libgit2's depth that turns a shallow repository into a whole one (`GIT_FETCH_DEPTH_UNSHALLOW`).
const GIT_FETCH_DEPTH_UNSHALLOW: i32 = i32::MAX;

/// Fetches a commit id, or one with an ancestry suffix (`<id>~3`): from the cache when it is
/// there (commits are immutable), else every branch and tag of the remote with their whole
/// history, then looks for it and pins it.
fn fetch_commit_blocking(
    path: &Path,
    url: &str,
    id: &str,
    auth: Option<&Auth>,
    cancel: &Arc<std::sync::atomic::AtomicBool>,
) -> Result<Fetched> {
    let _cache_lock = lock_cache(path, cancel)?;
    let repo = open_or_init(path)?;
    let session = Session::new(url, auth, cancel);
    let fetch_failed = |source| session.classify(url, source);
    let not_found = || Error::RefNotFound {
        reference: id.to_string(),
        url: redact_url(url),
    };
    let found = |commit: git2::Commit<'_>, received_objects| Fetched {
        revision: Revision(commit.id().to_string()),
        resolved_ref: commit.id().to_string(),
        received_objects,
        previous: None,
        rewritten: false,
    };
    if id.len() >= 40
        && let Ok(oid) = Oid::from_str(id)
        && let Ok(commit) = repo.find_commit(oid)
    {
        return Ok(found(commit, 0));
    }
    if let Ok(commit) = repo.revparse_single(id).and_then(|o| o.peel_to_commit()) {
        return Ok(found(commit, 0));
    }
    ensure_local_exists(url)?;
    let mut remote = repo.remote_anonymous(url).map_err(fetch_failed)?;
    let mut opts = session.fetch_options(url, false);
    // The cache is shallow where the transport allows it: an older commit, or an ancestor
    // (`<id>~3`), needs the whole history.
    if shallow_ok(url) {
        opts.depth(GIT_FETCH_DEPTH_UNSHALLOW);
    }
    remote
        .fetch(
            &[
                "+refs/heads/*:refs/driftless/heads/*",
                "+refs/tags/*:refs/driftless/tags/*",
            ],
            Some(&mut opts),
            None,
        )
        .map_err(fetch_failed)?;
    let received_objects = remote.stats().received_objects();
    let commit = repo
        .revparse_single(id)
        .and_then(|o| o.peel_to_commit())
        .map_err(|_| not_found())?;
    // Keep it reachable in the cache whatever happens to the branches.
    let pin = format!("refs/driftless/commits/{}", commit.id());
    repo.reference(&pin, commit.id(), true, "driftless: pinned commit")
        .map_err(|source| Error::ReadFailed {
            what: format!("commit {id}"),
            source,
        })?;
    Ok(found(commit, received_objects))
}

/// A remote ref fetched by [`GitCache::fetch_matching`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteHead {
    /// The full ref name on the remote, e.g. `refs/pull/7/head`.
    pub name: String,
    /// The commit it points at (fetched into the cache).
    pub revision: Revision,
    /// That commit's committer time, in seconds since the Unix epoch.
    pub commit_time: i64,
}

/// Longest ref name fetched for previews, in bytes (file systems allow 255 per path segment).
const MAX_REF_NAME: usize = 200;

/// Where the refs of previews are kept in the cache.
const PREVIEW_PREFIX: &str = "refs/driftless/preview/";

fn fetch_matching_blocking(
    path: &Path,
    url: &str,
    matches: &(dyn Fn(&str) -> bool + Send + Sync),
    auth: Option<&Auth>,
    cancel: &Arc<std::sync::atomic::AtomicBool>,
) -> Result<Vec<RemoteHead>> {
    let _cache_lock = lock_cache(path, cancel)?;
    let repo = open_or_init(path)?;
    let session = Session::new(url, auth, cancel);
    let fetch_failed = |source| session.classify(url, source);
    ensure_local_exists(url)?;
    let mut remote = repo.remote_anonymous(url).map_err(fetch_failed)?;
    let (heads, _) = session.list(&mut remote, url)?;
    let wanted: Vec<(String, Oid)> = heads
        .into_iter()
        .filter(|(name, _)| matches(name))
        .collect();
    let preview_ref = |name: &str| {
        format!(
            "{PREVIEW_PREFIX}{}",
            name.strip_prefix("refs/").unwrap_or(name)
        )
    };
    // A name Git itself would refuse (`a..b`, `x.lock`, a path too long for the file system)
    // cannot be fetched: it is left out, and the others still are.
    let wanted: Vec<(String, Oid)> = wanted
        .into_iter()
        .filter(|(name, _)| {
            let ok = name.len() <= MAX_REF_NAME
                && git2::Reference::is_valid_name(name)
                && git2::Reference::is_valid_name(&preview_ref(name));
            if !ok {
                tracing::warn!(git_ref = %name.chars().take(120).collect::<String>(), "Ref name Git refuses; ignored");
            }
            ok
        })
        .collect();
    // Only refs whose commit the cache does not point at already.
    let specs: Vec<String> = wanted
        .iter()
        .filter(|(name, oid)| repo.refname_to_id(&preview_ref(name)).ok() != Some(*oid))
        .map(|(name, _)| format!("+{name}:{}", preview_ref(name)))
        .collect();
    if !specs.is_empty() {
        let mut opts = session.fetch_options(url, true);
        opts.download_tags(AutotagOption::None);
        opts.update_fetchhead(false);
        let refs: Vec<&str> = specs.iter().map(String::as_str).collect();
        remote
            .fetch(&refs, Some(&mut opts), None)
            .map_err(fetch_failed)?;
    }
    // The listing succeeded: cached preview refs the remote no longer has are gone.
    let keep: HashSet<String> = wanted.iter().map(|(n, _)| preview_ref(n)).collect();
    let read_failed = |what: &str| {
        let what = what.to_string();
        move |source| Error::ReadFailed { what, source }
    };
    let stale: Vec<String> = repo
        .references_glob(&format!("{PREVIEW_PREFIX}*"))
        .map_err(read_failed("preview refs"))?
        .filter_map(|r| r.ok().and_then(|r| r.name().ok().map(str::to_string)))
        .filter(|n| !keep.contains(n))
        .collect();
    for name in stale {
        if let Ok(mut r) = repo.find_reference(&name) {
            let _ = r.delete();
        }
    }
    let mut out = Vec::new();
    for (name, oid) in wanted {
        // A ref to an annotated tag is followed to its commit; one to a tree or a blob is no
        // pull request's head, and is left out (the others still are previewed).
        let commit = match repo.find_object(oid, None).and_then(|o| o.peel_to_commit()) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(git_ref = %name, error = %e, "Ref does not point at a commit; ignored");
                continue;
            }
        };
        out.push(RemoteHead {
            name,
            revision: Revision(commit.id().to_string()),
            commit_time: commit.time().seconds(),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// A remote's refs (full name, commit) and its default branch, as listed.
type RemoteRefs = (Vec<(String, Oid)>, Option<String>);

/// [`Error::RepositoryNotFound`] for a local path that does not exist.
fn ensure_local_exists(url: &str) -> Result<()> {
    let is_local = !url.contains("://") && !url.contains('@');
    if is_local && !Path::new(url).exists() {
        return Err(Error::RepositoryNotFound {
            url: redact_url(url),
        });
    }
    Ok(())
}

/// The object folder of a repository on this machine (a path, or a `file://` URL), made
/// absolute; `None` for a remote URL, or when it cannot be opened (the listing before has said
/// why already).
fn local_objects(url: &str) -> Option<PathBuf> {
    let path = match url.strip_prefix("file://") {
        Some(p) => p,
        None if !url.contains("://") && !url.contains('@') => url,
        None => return None,
    };
    git_ready();
    let repo = Repository::open(path).ok()?;
    std::fs::canonicalize(repo.commondir().join("objects")).ok()
}

/// Makes `objects` (another repository's object folder) an alternate of the cache `repo`:
/// its objects are read from there, never copied. Written once; the file is replaced whole.
fn share_objects(repo: &Repository, objects: &Path) -> std::result::Result<(), git2::Error> {
    let info = repo.path().join("objects").join("info");
    let file = info.join("alternates");
    let line = format!("{}\n", objects.display());
    if std::fs::read_to_string(&file).is_ok_and(|had| had == line) {
        return Ok(());
    }
    let io =
        |e: std::io::Error| git2::Error::from_str(&format!("cannot write {}: {e}", file.display()));
    std::fs::create_dir_all(&info).map_err(io)?;
    let staging = info.join(format!("alternates.{}", std::process::id()));
    std::fs::write(&staging, line).map_err(io)?;
    std::fs::rename(&staging, &file).map_err(io)?;
    // The object database was opened before the alternate existed.
    repo.odb()?
        .add_disk_alternate(&objects.display().to_string())
}

/// True when the transport of `url` can fetch shallow (libgit2's local transport cannot).
fn shallow_ok(url: &str) -> bool {
    ["https://", "http://", "ssh://", "git://"]
        .iter()
        .any(|p| url.starts_with(p))
        || (url.contains('@') && url.contains(':') && !url.contains("://"))
}

/// Where a remote ref is kept in the cache: `refs/heads/x` → `refs/driftless/heads/x`.
fn local_ref(remote_ref: &str) -> String {
    format!(
        "refs/driftless/{}",
        remote_ref.strip_prefix("refs/").unwrap_or(remote_ref)
    )
}

/// Normalizes a slash-separated repository path, resolving `.` and `..`. `None` when it climbs
/// above the root.
/// `a/./b/../c` → `a/c`, as a repository path; `None` when `..` climbs past the root.
pub fn normalize(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            s => parts.push(s),
        }
    }
    Some(parts.join("/"))
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

const MAX_LINK_HOPS: usize = 16;

/// Lowercase hexadecimal of `bytes` (digests in cache keys and folder names).
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

struct Walker<'r> {
    repo: &'r Repository,
    root: git2::Tree<'r>,
    out: Files,
    /// Trees on the current walk path, to stop cycles through directory symlinks.
    stack: HashSet<Oid>,
    limits: Limits,
    /// Entries visited and manifest bytes read so far.
    entries: u64,
    bytes: u64,
    /// Set when a limit was passed: the walk stops and reads nothing more.
    stopped: bool,
    /// Set when a symlink was followed to a file or folder: [`Files::content_id`] must then
    /// cover the files read, not only the tree at the path.
    followed_link: bool,
    /// Which files to read, by path.
    wants: fn(&str) -> bool,
    /// List the files wanted with their sizes (from the object header) instead of reading
    /// their contents ([`Files::unread`]).
    list_only: bool,
    /// Stop at folders that hold a kustomization file or a chart, and note them
    /// ([`Files::kustomizations`], [`Files::charts`]) instead of reading into them.
    stop_at_rendered: bool,
    /// When set, the files wanted are noted here (path and blob id, in the order walked)
    /// rather than read as they are met: [`read_files`] reads them after the walk, on every
    /// core.
    deferred: Option<Vec<(String, Oid)>>,
}

/// The files `wants` selects under `path` at `revision` of the cache `repo`, within `limits`
/// (with `list_only`, their ids and sizes, not their contents). The contents are read after
/// the walk on every core ([`read_blobs`]); a walk that a limit stops, whose files are larger
/// than `limits.max_bytes` in all, or whose reading fails, is walked again reading each file as
/// it is met, so that what is reported (the file at which the walk stopped, and nothing walked
/// after it; or the file that cannot be read) is that walk's.
fn read_files(
    repo: &Repository,
    revision: &Revision,
    path: &str,
    limits: Limits,
    wants: fn(&str) -> bool,
    list_only: bool,
) -> Result<Files> {
    let walk_reading = |list_only| {
        read_files_walking(repo, revision, path, limits, wants, list_only, false).map(|w| w.files)
    };
    if list_only {
        return walk_reading(true);
    }
    let Walked {
        mut files,
        stopped,
        deferred: pending,
    } = read_files_walking(repo, revision, path, limits, wants, false, true)?;
    if stopped {
        return walk_reading(false);
    }
    let blobs: Vec<(&str, Oid)> = pending.iter().map(|(p, o)| (p.as_str(), *o)).collect();
    // A blob that cannot be read, a handle or thread that cannot be had: the walk reading each
    // file as met decides (it may stop at the byte limit before that blob, as the parts, read
    // side by side, may not).
    let Ok(read) = read_blobs(repo, &blobs, limits.max_bytes) else {
        return walk_reading(false);
    };
    let mut bytes = 0u64;
    let mut contents = Vec::with_capacity(read.len());
    for blob in read {
        match blob {
            Some(c) if bytes + c.len() as u64 <= limits.max_bytes => {
                bytes += c.len() as u64;
                contents.push(c);
            }
            _ => return walk_reading(false),
        }
    }
    files
        .files
        .extend(pending.into_iter().map(|(p, _)| p).zip(contents));
    files.files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(files)
}

/// One walk of [`read_files_walking`].
struct Walked {
    files: Files,
    /// A limit stopped the walk (`files` is then empty).
    stopped: bool,
    /// The files wanted, not read yet (path and blob id, in the order walked), with `defer`.
    deferred: Vec<(String, Oid)>,
}

/// [`read_files`] in one walk: each file read as it is met, or (`defer`) noted in
/// [`Walked::deferred`] to be read after the walk.
fn read_files_walking(
    repo: &Repository,
    revision: &Revision,
    path: &str,
    limits: Limits,
    wants: fn(&str) -> bool,
    list_only: bool,
    defer: bool,
) -> Result<Walked> {
    let read_failed = |what: &str| {
        let what = what.to_string();
        move |source| Error::ReadFailed { what, source }
    };
    let oid = Oid::from_str(&revision.0).map_err(read_failed("revision id"))?;
    let commit = repo
        .find_commit(oid)
        .map_err(read_failed(&format!("commit {revision}")))?;
    let root = commit.tree().map_err(read_failed("root tree"))?;
    let path_not_found = |why: &'static str| Error::PathNotFound {
        path: path.to_string(),
        revision: revision.0.clone(),
        why,
    };
    let missing = "does not exist";
    let base = normalize(path).ok_or_else(|| path_not_found(missing))?;
    let mut walker = Walker::new(repo, root.clone(), limits, wants, true);
    walker.list_only = list_only;
    walker.out.unread = list_only;
    walker.deferred = defer.then(Vec::new);
    let tree = if base.is_empty() {
        root
    } else {
        let entry = walker
            .resolve(&base, 0)
            .ok_or_else(|| path_not_found(missing))?;
        match entry {
            Resolved::Tree(t) => t,
            Resolved::Blob(..) => {
                return Err(path_not_found(
                    "is a file, not a folder: point source.path at the folder that holds it",
                ));
            }
            Resolved::Outside(_) => {
                return Err(path_not_found(
                    "is a symbolic link that leaves the repository",
                ));
            }
            Resolved::TooDeep => {
                return Err(path_not_found("is a symbolic link that loops"));
            }
            Resolved::Missing => return Err(path_not_found(missing)),
        }
    };
    walker.walk(&tree, &base, 0)?;
    walker.out.content_id = if walker.followed_link {
        let mut read: Vec<(&String, &String)> = walker.out.blob_ids.iter().collect();
        read.sort();
        let mut h = Sha256::new();
        h.update(format!("tree={}\0", tree.id()));
        for (path, id) in read {
            h.update(format!("{path}={id}\0"));
        }
        hex(&h.finalize())
    } else {
        tree.id().to_string()
    };
    if walker.stopped {
        // Refused whole: what was read so far is no desired set, and parsing it would only
        // repeat the cost the bound is there to cap.
        walker.out.files.clear();
        walker.out.blob_ids.clear();
    }
    walker.out.files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Walked {
        files: walker.out,
        stopped: walker.stopped,
        deferred: walker.deferred.unwrap_or_default(),
    })
}

enum Resolved<'r> {
    Tree(git2::Tree<'r>),
    Blob(Oid),
    /// The (normalized attempt of the) target climbs out of the repository or is absolute.
    Outside(String),
    /// Nothing there.
    Missing,
    /// Too many links in a row.
    TooDeep,
}

impl<'r> Walker<'r> {
    /// A walker of `root`'s tree that reads the files `wants` selects, within `limits`.
    fn new(
        repo: &'r Repository,
        root: git2::Tree<'r>,
        limits: Limits,
        wants: fn(&str) -> bool,
        stop_at_rendered: bool,
    ) -> Self {
        Walker {
            repo,
            root,
            out: Files::default(),
            stack: HashSet::new(),
            limits,
            entries: 0,
            bytes: 0,
            stopped: false,
            followed_link: false,
            wants,
            list_only: false,
            stop_at_rendered,
            deferred: None,
        }
    }

    /// Resolves a repository path through any symlinks along it.
    fn resolve(&self, path: &str, hops: usize) -> Option<Resolved<'r>> {
        if hops > MAX_LINK_HOPS {
            return Some(Resolved::TooDeep);
        }
        let mut current = self.root.clone();
        let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let mut walked = String::new();
        for (i, seg) in segs.iter().enumerate() {
            let Some(entry) = current.get_name(seg).map(|e| e.to_owned()) else {
                return Some(Resolved::Missing);
            };
            let last = i + 1 == segs.len();
            let here = join(&walked, seg);
            if entry.filemode() == 0o120000 {
                let target = self.link_target(entry.id())?;
                let dir = walked.clone();
                let rest = segs[i + 1..].join("/");
                let Some(joined) = link_destination(&dir, &target) else {
                    return Some(Resolved::Outside(target));
                };
                let full = if rest.is_empty() {
                    joined
                } else {
                    join(&joined, &rest)
                };
                return self.resolve(&full, hops + 1);
            }
            match entry.kind() {
                Some(ObjectType::Tree) => {
                    current = self.repo.find_tree(entry.id()).ok()?;
                }
                Some(ObjectType::Blob) if last => return Some(Resolved::Blob(entry.id())),
                _ => return Some(Resolved::Missing),
            }
            walked = here;
        }
        Some(Resolved::Tree(current))
    }

    fn link_target(&self, blob: Oid) -> Option<String> {
        let blob = self.repo.find_blob(blob).ok()?;
        Some(String::from_utf8_lossy(blob.content()).into_owned())
    }

    fn error_at(&mut self, path: &str, message: String) {
        self.out
            .diagnostics
            .push(Diagnostic::error(path, 1, 1, message));
    }

    /// Stops the walk with an error naming `path` and the bound passed.
    fn stop(&mut self, path: &str, message: String) {
        self.stopped = true;
        self.out.diagnostics.push(Diagnostic::error(
            if path.is_empty() { "." } else { path },
            1,
            1,
            format!("{message}; the revision is not read further and nothing of it is applied"),
        ));
    }

    fn walk(&mut self, tree: &git2::Tree<'r>, prefix: &str, depth: u64) -> Result<()> {
        if self.stopped {
            return Ok(());
        }
        if depth > self.limits.max_depth {
            self.stop(
                prefix,
                format!(
                    "`{prefix}` is more than {} folders below the app's path (source.limits.maxDepth)",
                    self.limits.max_depth
                ),
            );
            return Ok(());
        }
        if !self.stack.insert(tree.id()) {
            self.error_at(
                prefix,
                format!(
                    "symlink `{prefix}` leads back into a folder it is in (a cycle); remove it"
                ),
            );
            return Ok(());
        }
        if self.stop_at_rendered {
            let has = |name: &str| tree.get_name(name).is_some();
            if KUSTOMIZATION_FILES.iter().any(|n| has(n)) {
                self.out.kustomizations.push(prefix.to_string());
                self.stack.remove(&tree.id());
                return Ok(());
            }
            if has("Chart.yaml") {
                self.out.charts.push(prefix.to_string());
                self.stack.remove(&tree.id());
                return Ok(());
            }
        }
        for entry in tree.iter() {
            if self.stopped {
                return Ok(());
            }
            self.entries += 1;
            if self.entries > self.limits.max_entries {
                self.stop(
                    prefix,
                    format!(
                        "the app's path holds more than {} files and folders (source.limits.maxEntries; a folder listed several times counts each time)",
                        self.limits.max_entries
                    ),
                );
                return Ok(());
            }
            let Ok(name) = entry.name() else {
                // Skipping it would drop its objects and prune them: an error instead, unless
                // it is a plain file that is not a manifest anyway.
                let shown = join(prefix, &String::from_utf8_lossy(entry.name_bytes()));
                let plain_file = entry.kind() == Some(ObjectType::Blob)
                    && entry.filemode() != 0o120000
                    && !(self.wants)(&shown);
                if !plain_file {
                    self.error_at(
                        &shown,
                        format!("the name of `{shown}` is not valid UTF-8; rename it"),
                    );
                }
                continue;
            };
            let path = join(prefix, name);
            if entry.filemode() == 0o120000 {
                self.follow_link(&path, entry.id(), depth)?;
                continue;
            }
            match entry.kind() {
                Some(ObjectType::Tree) => {
                    let sub =
                        self.repo
                            .find_tree(entry.id())
                            .map_err(|source| Error::ReadFailed {
                                what: format!("folder {path}"),
                                source,
                            })?;
                    self.walk(&sub, &path, depth + 1)?;
                }
                Some(ObjectType::Blob) if (self.wants)(&path) => {
                    self.read_blob(&path, entry.id())?;
                }
                // Skipping a submodule would drop the objects it holds and prune them.
                Some(ObjectType::Commit) => self.error_at(
                    &path,
                    format!(
                        "`{path}` is a Git submodule, which driftless does not read: its objects would be missing and pruned; move its manifests into this repository or give it an app of its own"
                    ),
                ),
                _ => {} // other files are not manifests
            }
        }
        self.stack.remove(&tree.id());
        Ok(())
    }

    fn read_blob(&mut self, path: &str, oid: Oid) -> Result<()> {
        if !self.list_only
            && let Some(deferred) = &mut self.deferred
        {
            deferred.push((path.to_string(), oid));
            self.out.blob_ids.insert(path.to_string(), oid.to_string());
            return Ok(());
        }
        let failed = |source| Error::ReadFailed {
            what: format!("file {path}"),
            source,
        };
        let (size, contents) = if self.list_only {
            // The object's header only: no inflating, no hashing of the contents.
            let odb = self.repo.odb().map_err(failed)?;
            let (size, kind) = odb.read_header(oid).map_err(failed)?;
            if kind != git2::ObjectType::Blob {
                return Err(failed(git2::Error::from_str(&format!(
                    "object {oid} is a {kind}, not a blob"
                ))));
            }
            (size, Vec::new())
        } else {
            let blob = self.repo.find_blob(oid).map_err(failed)?;
            (blob.size(), blob.content().to_vec())
        };
        self.bytes += size as u64;
        if self.bytes > self.limits.max_bytes {
            let max = self.limits.max_bytes;
            self.stop(
                path,
                format!("the app's manifests are larger than {max} bytes in all (source.limits.maxBytes)"),
            );
            return Ok(());
        }
        self.out.files.push((path.to_string(), contents));
        self.out.blob_ids.insert(path.to_string(), oid.to_string());
        Ok(())
    }

    fn follow_link(&mut self, path: &str, link_blob: Oid, depth: u64) -> Result<()> {
        let Some(target) = self.link_target(link_blob) else {
            self.error_at(path, format!("cannot read symlink `{path}`"));
            return Ok(());
        };
        let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
        let Some(dest) = link_destination(dir, &target) else {
            self.error_at(
                path,
                format!("symlink `{path}` points outside the repository (`{target}`); it is not followed"),
            );
            return Ok(());
        };
        match self.resolve(&dest, 1) {
            Some(Resolved::Tree(t)) => {
                self.followed_link = true;
                self.walk(&t, path, depth + 1)
            }
            Some(Resolved::Blob(oid)) => {
                self.followed_link = true;
                if (self.wants)(path) {
                    self.read_blob(path, oid)?;
                }
                Ok(())
            }
            Some(Resolved::Outside(t)) => {
                self.error_at(
                    path,
                    format!("symlink `{path}` leads outside the repository (through `{t}`); it is not followed"),
                );
                Ok(())
            }
            Some(Resolved::Missing) | None => {
                self.error_at(
                    path,
                    format!("symlink `{path}` points to `{target}`, which does not exist"),
                );
                Ok(())
            }
            Some(Resolved::TooDeep) => {
                self.error_at(
                    path,
                    format!("symlink `{path}`: too many levels of symbolic links"),
                );
                Ok(())
            }
        }
    }
}

/// Where a link in folder `dir` with target `target` leads, as a repository path; `None` when
/// the target is absolute or climbs out of the repository.
fn link_destination(dir: &str, target: &str) -> Option<String> {
    if target.starts_with('/') || target.starts_with('\\') || target.contains(':') {
        return None;
    }
    normalize(&join(dir, target))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fetch_waits_to_gather_only_when_others_may_ask() {
        let url = "https://example.com/a.git";
        let asks = |git: &GitCache, refs: &[Option<&str>]| -> Vec<bool> {
            let g = git.gather_for(&git.repo_path(url));
            let mut g = g.lock().unwrap();
            refs.iter().map(|r| g.ask(r.map(str::to_string))).collect()
        };
        // Nobody said who reads it: the first fetch cannot know, and waits; later ones for
        // the only ref asked do not.
        let git = GitCache::new("/nonexistent");
        assert_eq!(asks(&git, &[None, None]), [true, false]);

        // One app alone said it reads it, at one ref: fetched at once.
        let git = GitCache::new("/nonexistent");
        git.expect(url, Some("main"));
        assert_eq!(asks(&git, &[Some("main"), Some("main")]), [false, false]);

        // Two apps at one ref: the first fetch waits for the other.
        let git = GitCache::new("/nonexistent");
        git.expect(url, Some("main"));
        git.expect(url, Some("main"));
        assert_eq!(asks(&git, &[Some("main"), Some("main")]), [true, false]);

        // Two refs: every fetch gathers them.
        let git = GitCache::new("/nonexistent");
        git.expect(url, Some("main"));
        git.expect(url, Some("release"));
        assert_eq!(asks(&git, &[Some("main"), Some("main")]), [true, true]);

        // An app at a commit id is a reader, never a ref to gather.
        let git = GitCache::new("/nonexistent");
        git.expect(url, Some("main"));
        git.expect(url, Some("0123456789abcdef0123456789abcdef01234567~2"));
        assert_eq!(asks(&git, &[Some("main")]), [true]);

        // Another repository's readers are its own.
        git.expect("https://example.com/b.git", Some("main"));
        let b = git.gather_for(&git.repo_path("https://example.com/b.git"));
        assert!(!b.lock().unwrap().ask(Some("main".into())));
    }

    #[test]
    fn known_hosts_lines_match_hosts_ports_and_keys() {
        use base64::Engine as _;
        let key = b"key-one";
        let other = b"key-two";
        let b64 = |k: &[u8]| base64::engine::general_purpose::STANDARD.encode(k);
        let text = format!(
            "# a comment\n\n@cert-authority *.example.com ssh-ed25519 {}\ngithub.com,140.82.1.1 ssh-ed25519 {}\n[127.0.0.1]:2222 ssh-ed25519 {}\n",
            b64(other),
            b64(key),
            b64(key)
        );
        assert!(check_known_host(&text, "github.com", None, key).is_ok());
        assert!(check_known_host(&text, "140.82.1.1", None, key).is_ok());
        assert!(
            check_known_host(&text, "127.0.0.1", None, key).is_ok(),
            "any port"
        );
        match check_known_host(&text, "github.com", None, other) {
            Err(Error::HostKeyMismatch {
                changed: true,
                fingerprint,
                ..
            }) => {
                assert_eq!(fingerprint, super::fingerprint(other));
            }
            r => panic!("{r:?}"),
        }
        assert!(matches!(
            check_known_host(&text, "gitlab.com", None, key),
            Err(Error::HostKeyMismatch { changed: false, .. })
        ));
        assert!(
            check_known_host(&text, "x.example.com", None, other).is_err(),
            "certificate authorities are not trusted as keys"
        );
        // With the URL's port: `[host]:port` exactly, plain names for port 22.
        assert!(check_known_host(&text, "127.0.0.1", Some(2222), key).is_ok());
        assert!(check_known_host(&text, "127.0.0.1", Some(2200), key).is_err());
        assert!(check_known_host(&text, "github.com", Some(22), key).is_ok());
        // Hashed entries, as `ssh-keyscan -H` writes them: HMAC-SHA1(salt, name).
        use hmac::{KeyInit, Mac};
        let hashed = |name: &str| {
            let salt = b"0123456789abcdef0123";
            let mut mac = hmac::Hmac::<sha1::Sha1>::new_from_slice(salt).unwrap();
            mac.update(name.as_bytes());
            format!(
                "|1|{}|{} ssh-ed25519 {}\n",
                b64(salt),
                b64(&mac.finalize().into_bytes()),
                b64(key)
            )
        };
        assert!(check_known_host(&hashed("[10.0.0.1]:2222"), "10.0.0.1", Some(2222), key).is_ok());
        assert!(
            check_known_host(&hashed("gitea.example.com"), "gitea.example.com", None, key).is_ok()
        );
        assert!(matches!(
            check_known_host(&hashed("gitea.example.com"), "other.example.com", None, key),
            Err(Error::HostKeyMismatch { changed: false, .. })
        ));
    }

    #[test]
    fn allowed_signers_keep_git_keys_only() {
        let key =
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq9lMNO2nS2aRr8uxR0nEXEZYyYU3k1AGgJKjRM3D0l";
        let text = format!(
            "# comment\n\nalice@example.com {key} laptop\nbob@example.com namespaces=\"file\" {key}\nca@example.com cert-authority {key}\ncarol@example.com namespaces=\"git,file\" {key}\n"
        );
        let s = AllowedSigners::parse(&text).unwrap();
        let principals: Vec<&str> = s.keys.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(principals, vec!["alice@example.com", "carol@example.com"]);
        assert!(
            AllowedSigners::parse("alice ssh-ed25519 not-base64")
                .unwrap_err()
                .starts_with("line 1:")
        );
        assert!(
            AllowedSigners::parse("\nalice")
                .unwrap_err()
                .starts_with("line 2:")
        );
        assert!(
            AllowedSigners::parse(key)
                .unwrap_err()
                .starts_with("line 1:"),
            "no principal: no panic"
        );
        let odd = AllowedSigners::parse(&format!("ssh-deploy@example.com {key}")).unwrap();
        assert_eq!(odd.len(), 1);
        let upper = AllowedSigners::parse(&format!("a@b NAMESPACES=\"file\" {key}")).unwrap();
        assert!(upper.is_empty(), "option names are case-insensitive");
        assert!(
            AllowedSigners::parse(&format!("a@b valid-before=\"20200101\" {key}"))
                .unwrap_err()
                .contains("not supported")
        );
    }

    #[test]
    fn urls_lose_their_credentials_when_shown() {
        assert_eq!(redact_url("https://tok@h/r.git"), "https://***@h/r.git");
        assert_eq!(
            redact_url("https://u:p@h:8443/r.git"),
            "https://***@h:8443/r.git"
        );
        assert_eq!(redact_url("ssh://git@h/r.git"), "ssh://git@h/r.git");
        assert_eq!(redact_url("ssh://git:pw@h/r.git"), "ssh://***@h/r.git");
        assert_eq!(redact_url("git@h:r.git"), "git@h:r.git");
        assert_eq!(redact_url("/srv/r.git"), "/srv/r.git");
        assert_eq!(
            redact_url("https://h/z.git?token=s3cret&x=1"),
            "https://h/z.git?***"
        );
        assert_eq!(
            redact_url("https://u:p@h/z.git#s3cret"),
            "https://***@h/z.git#***"
        );
        assert_eq!(
            redact_url("https://h/a?b@c"),
            "https://***@c",
            "more hidden, never less"
        );
        // A password with characters a URL reader takes for a query or fragment.
        assert_eq!(
            redact_url("http://alice:sec#HASH@127.0.0.1:9/web.git"),
            "http://***@127.0.0.1:9/web.git"
        );
        assert_eq!(
            redact_url("http://alice:QM?QS@127.0.0.1:9/web.git?x=1"),
            "http://***@127.0.0.1:9/web.git?***"
        );
        assert_eq!(redact_url("ssh://git@h/r.git#x"), "ssh://git@h/r.git#***");
        assert_eq!(
            redact_url("https://h/a@b"),
            "https://***@b",
            "more hidden, never less"
        );
        assert_eq!(
            redact_url("https://user:ab/cd@127.0.0.1:1/r.git"),
            "https://***@127.0.0.1:1/r.git",
            "a slash in a password"
        );
        assert_eq!(
            host_of("https://u:p@Host:8443/x").as_deref(),
            Some("host:8443")
        );
        assert_eq!(host_of("https://Host:8443/x").as_deref(), Some("host:8443"));
        assert_eq!(
            host_of("git@github.com:acme/web.git").as_deref(),
            Some("github.com")
        );
    }

    #[test]
    fn link_destinations_stay_inside_the_repository() {
        assert_eq!(
            link_destination("a/b", "../c.yaml").as_deref(),
            Some("a/c.yaml")
        );
        assert_eq!(
            link_destination("a", "./x/y.yaml").as_deref(),
            Some("a/x/y.yaml")
        );
        assert_eq!(link_destination("a", "../../etc/passwd"), None);
        assert_eq!(link_destination("", "/etc/passwd"), None);
        assert_eq!(link_destination("a", "../b"), Some("b".into()));
    }

    #[test]
    fn cache_paths_are_stable_and_distinct_per_url() {
        let c = GitCache::new("/cache");
        let a = c.repo_path("https://github.com/kubernetes/examples.git");
        assert_eq!(a, c.repo_path("https://github.com/kubernetes/examples.git"));
        assert!(a.to_string_lossy().contains("/repos/examples-"));
        assert_ne!(a, c.repo_path("https://example.com/other/examples.git"));
        let q = c.repo_path("https://h/z.git?token=s3cret");
        let name = q.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("z-") && !name.contains("s3cret") && !name.contains("token"),
            "{name}"
        );
        // Nor any part of a password a URL reader would take for a port or a fragment.
        let p = c.repo_path("http://alice:sec#HASHSECRET@127.0.0.1:9/web.git");
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("web-") && !name.contains("sec"), "{name}");
    }
}
