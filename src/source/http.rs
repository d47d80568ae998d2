//! Git's smart HTTP protocol for libgit2, over reqwest and rustls: the transport of `http://`
//! and `https://` sources.
//!
//! libgit2 speaks the Git protocol itself and asks this transport only to carry its bytes
//! ([`git2::transport::Transport::smart`], stateless RPC): a `GET {url}/info/refs?service=git-upload-pack`
//! for the refs, then one `POST {url}/git-upload-pack` per round of negotiation, each request's
//! body what libgit2 wrote and each response's body what it reads (Git's
//! `Documentation/gitprotocol-http.txt`). Why not libgit2's own HTTP transport: it brings
//! OpenSSL as a second TLS stack beside rustls, and initializing it read the system's CA bundle
//! at every start (some 13 ms of CPU of each `driftless sync`, local repositories included).
//!
//! What it does as libgit2 and `git` do:
//! - credentials are sent only when the server asks (401), only to the host of the configured
//!   URL, and once: a second 401 is a refusal. They come from the URL's user and password when
//!   it has both, else from `source.auth` (`username`, default `git`, and `secret`).
//! - redirects of the first request are followed (at most 5), never from https to anything
//!   else, and later requests go where it ended; credentials never follow one to another host,
//!   and credentials a redirect names are not sent.
//! - no proxy; connections time out after [`super::CONNECT_TIMEOUT_MS`], reads after
//!   [`super::SOCKET_TIMEOUT_MS`] without data.
//! - every read checks the fetch's cancel flag (its timeout: libgit2's progress callbacks, the
//!   other way a fetch stops, do not run while it reads the refs), and the refs are read up to
//!   [`MAX_ADVERTISEMENT`] bytes.
//! - certificates are checked by rustls against the system's roots (`SSL_CERT_FILE` and
//!   `SSL_CERT_DIR` when set), as every other TLS connection of driftless.
//!
//! Errors carry libgit2's classes, which [`super::Session::classify`] reads: `Auth` for refused
//! or missing credentials, `Net` for connections, `Ssl` for certificates, `Http` for other
//! answers. No URL with its credentials, and no credential, is in any message.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use git2::transport::{Service, SmartSubtransport, SmartSubtransportStream, Transport};
use git2::{Error as GitError, ErrorClass, ErrorCode};
use reqwest::StatusCode;
use reqwest::Url;
use reqwest::blocking::{Client, RequestBuilder, Response};
use reqwest::header::{self, HeaderValue};
use secrecy::{ExposeSecret, SecretString};

use super::Auth;
// An error and its causes, each once; reqwest's own text names its URL unless
// `reqwest::Error::without_url` took it out.
use crate::store::error_chain as chain;

/// Redirects of the first request followed at most (libgit2 and curl's default allow more;
/// Git hosts redirect once, to their canonical name).
const MAX_REDIRECTS: usize = 5;

/// Most bytes of a refs advertisement read (the refs and their commits, some 60 bytes each: two
/// million refs): libgit2 keeps every ref it is told of, so a server that never ends the list
/// would fill the memory.
const MAX_ADVERTISEMENT: u64 = 128 << 20;

/// What the transports libgit2 makes on this thread need from the fetch that runs here: the
/// configured URL's credentials and the fetch's cancel flag. Set by [`Scope::enter`] for the
/// fetch's duration.
#[derive(Clone, Default)]
pub(super) struct Context {
    auth: Option<Auth>,
    /// Set when the fetch is to stop (its timeout, the agent stopping): every read of a
    /// response checks it. libgit2's progress callbacks, the other way a fetch stops, are not
    /// called while it reads the refs.
    cancel: Option<Arc<AtomicBool>>,
}

thread_local! {
    static CONTEXT: RefCell<Context> = RefCell::default();
}

/// The [`Context`] of the transports made on this thread while it lives (libgit2 makes them on
/// the thread that connects); the one before is put back when it drops.
pub(super) struct Scope {
    previous: Context,
}

impl Scope {
    /// Sets `auth` (`source.auth` of the repository about to be fetched) and the fetch's
    /// `cancel` flag for this thread.
    pub(super) fn enter(auth: Option<&Auth>, cancel: Arc<AtomicBool>) -> Self {
        let context = Context {
            auth: auth.cloned(),
            cancel: Some(cancel),
        };
        Scope {
            previous: CONTEXT.with(|c| c.replace(context)),
        }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        let previous = std::mem::take(&mut self.previous);
        CONTEXT.with(|c| *c.borrow_mut() = previous);
    }
}

/// Registers this transport for `http://` and `https://` URLs, in place of libgit2's own.
///
/// # Safety
///
/// libgit2's transport registry is not synchronized: call it before any thread uses git2
/// (as [`super::git_ready`] does).
pub(super) unsafe fn register() -> Result<(), GitError> {
    for scheme in ["http", "https"] {
        // SAFETY: the caller guarantees that no other thread uses git2 yet.
        unsafe {
            git2::transport::register(scheme, |remote| {
                let context = CONTEXT.with(|c| c.borrow().clone());
                Transport::smart(
                    remote,
                    true,
                    Http {
                        shared: Arc::new(Shared {
                            context,
                            state: Mutex::default(),
                        }),
                    },
                )
            })?;
        }
    }
    Ok(())
}

/// The one HTTP client of the transport: no redirects followed by itself (see the module
/// documentation), no proxy, the timeouts of libgit2's.
fn client() -> Result<&'static Client, GitError> {
    static CLIENT: OnceLock<Result<Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            // The TLS provider of every client of driftless (the CLI installs it as well).
            let _ = rustls::crypto::ring::default_provider().install_default();
            Client::builder()
                .user_agent(concat!(
                    "git/2.0 (driftless/",
                    env!("CARGO_PKG_VERSION"),
                    ")"
                ))
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .connect_timeout(Duration::from_millis(super::CONNECT_TIMEOUT_MS as u64))
                // Per read of a response body and per request sent, not for the whole body.
                .timeout(Duration::from_millis(super::SOCKET_TIMEOUT_MS as u64))
                .build()
                .map_err(|e| chain(&e))
        })
        .as_ref()
        .map_err(|e| GitError::new(ErrorCode::GenericError, ErrorClass::Http, e))
}

/// A failed request as libgit2 classes it: a certificate problem is `Ssl`, anything else on
/// the way `Net` (the source is unreachable).
fn request_failed(e: reqwest::Error) -> GitError {
    let message = chain(&e.without_url());
    let class = if message.contains("certificate") {
        ErrorClass::Ssl
    } else {
        ErrorClass::Net
    };
    GitError::new(ErrorCode::GenericError, class, message)
}

fn auth_error(message: &str) -> GitError {
    GitError::new(ErrorCode::Auth, ErrorClass::Http, message)
}

/// The host and port a URL's requests go to (the scheme's default port when it names none).
fn authority(url: &Url) -> (String, Option<u16>) {
    (
        url.host_str().unwrap_or_default().to_ascii_lowercase(),
        url.port_or_known_default(),
    )
}

/// One connection's state, shared by its requests (libgit2 makes one transport per connect).
struct Shared {
    context: Context,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The repository's URL as the first request found it (after redirects), without
    /// credentials.
    base: Option<Url>,
    /// The configured URL's host and port: credentials go there only.
    home: Option<(String, Option<u16>)>,
    /// (user, password) to answer a 401 with.
    credentials: Option<(String, SecretString)>,
    /// The server asked for credentials and got them: every later request carries them.
    send_credentials: bool,
}

struct Http {
    shared: Arc<Shared>,
}

impl SmartSubtransport for Http {
    fn action(
        &self,
        url: &str,
        action: Service,
    ) -> Result<Box<dyn SmartSubtransportStream>, GitError> {
        match action {
            Service::UploadPackLs => {
                let response = self.shared.discover(url)?;
                Ok(Box::new(Body {
                    response,
                    cancel: self.shared.context.cancel.clone(),
                    read: 0,
                    limit: Some(MAX_ADVERTISEMENT),
                }))
            }
            Service::UploadPack => {
                let base = self.shared.base(url)?;
                Ok(Box::new(Post {
                    shared: self.shared.clone(),
                    base,
                    request: Vec::new(),
                    response: None,
                    read: 0,
                }))
            }
            Service::ReceivePackLs | Service::ReceivePack => Err(GitError::new(
                ErrorCode::GenericError,
                ErrorClass::Http,
                "pushing is not supported by this transport",
            )),
        }
    }

    fn close(&self) -> Result<(), GitError> {
        Ok(())
    }
}

impl Shared {
    /// The URL without credentials, and the credentials it or `source.auth` gives.
    fn split(&self, url: &str) -> Result<(Url, Option<(String, SecretString)>), GitError> {
        let mut parsed = Url::parse(url).map_err(|e| {
            GitError::new(
                ErrorCode::GenericError,
                ErrorClass::Http,
                format!("the repository URL does not parse: {e}"),
            )
        })?;
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        let from_url = match (parsed.username(), parsed.password()) {
            (user, Some(password)) if !user.is_empty() => {
                Some((decode(user), SecretString::from(decode(password))))
            }
            _ => None,
        };
        let user_in_url = (!parsed.username().is_empty()).then(|| decode(parsed.username()));
        let _ = parsed.set_username("");
        let _ = parsed.set_password(None);
        let credentials = from_url.or_else(|| {
            let auth = self.context.auth.as_ref()?;
            let secret = auth.secret.clone()?;
            let user = auth
                .username
                .clone()
                .or(user_in_url)
                .unwrap_or_else(|| "git".into());
            Some((user, secret))
        });
        Ok((parsed, credentials))
    }

    /// The base URL of the later requests: where the first one ended.
    fn base(&self, url: &str) -> Result<Url, GitError> {
        if let Some(base) = &self.state.lock().unwrap_or_else(|e| e.into_inner()).base {
            return Ok(base.clone());
        }
        Ok(self.split(url)?.0)
    }

    /// Sends `request` to `url`, with the credentials when the server asked for them and `url`
    /// is on the configured host; answers a 401 with them once. `request` is made again for
    /// the second try.
    fn send(
        &self,
        url: &Url,
        request: impl Fn(&Client, Url) -> RequestBuilder,
    ) -> Result<Response, GitError> {
        let client = client()?;
        loop {
            let (send, credentials, home) = {
                let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                (
                    state.send_credentials,
                    state.credentials.clone(),
                    state.home.clone(),
                )
            };
            let at_home = home.as_ref() == Some(&authority(url));
            let mut builder = request(client, url.clone());
            if send
                && at_home
                && let Some((user, password)) = &credentials
            {
                builder = builder.basic_auth(user, Some(password.expose_secret()));
            }
            let response = builder.send().map_err(request_failed)?;
            if response.status() != StatusCode::UNAUTHORIZED {
                return Ok(response);
            }
            if credentials.is_none() {
                return Err(auth_error(
                    "the server asks for credentials (401) and the app has no source.auth secret",
                ));
            }
            if !at_home {
                return Err(auth_error(
                    "refusing to send credentials to another host than the configured one (a redirect?)",
                ));
            }
            // Sent once already (this request or an earlier one): a refusal.
            if send {
                return Err(auth_error("the credentials were refused (401)"));
            }
            self.state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .send_credentials = true;
        }
    }

    /// `GET {url}/info/refs?service=git-upload-pack`, following redirects: the response whose
    /// body is the refs' advertisement.
    fn discover(&self, url: &str) -> Result<Response, GitError> {
        let (base, credentials) = self.split(url)?;
        {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            state.home = Some(authority(&base));
            state.credentials = credentials;
            state.base = None;
        }
        let mut target = join(&base, "info/refs?service=git-upload-pack");
        for _ in 0..=MAX_REDIRECTS {
            let response = self.send(&target, |client, url| {
                client.get(url).header(header::ACCEPT, "*/*")
            })?;
            let status = response.status();
            if status.is_redirection() {
                let location = response
                    .headers()
                    .get(header::LOCATION)
                    .and_then(|l| l.to_str().ok());
                target = redirect_target(&target, location, status)?;
                continue;
            }
            check_status(&response, "application/x-git-upload-pack-advertisement")?;
            // Later requests go where this one ended: the URL less its own path and query.
            let mut ended = target.clone();
            ended.set_query(None);
            let path = ended.path().trim_end_matches("/info/refs").to_string();
            ended.set_path(&path);
            self.state.lock().unwrap_or_else(|e| e.into_inner()).base = Some(ended);
            return Ok(response);
        }
        Err(GitError::new(
            ErrorCode::GenericError,
            ErrorClass::Http,
            format!("more than {MAX_REDIRECTS} redirects"),
        ))
    }
}

/// Where a redirect (`status`, its `Location`) of a request to `from` goes: the location
/// resolved against `from`, without credentials it may name (reqwest would send them). A
/// missing or unreadable location, or one from https to anything else, is an error: from TLS
/// to plain text would let anyone on the way change the manifests (libgit2 refuses it too).
fn redirect_target(
    from: &Url,
    location: Option<&str>,
    status: StatusCode,
) -> Result<Url, GitError> {
    let mut to = location.and_then(|l| from.join(l).ok()).ok_or_else(|| {
        GitError::new(
            ErrorCode::GenericError,
            ErrorClass::Http,
            format!("a redirect ({status}) without a usable Location"),
        )
    })?;
    if from.scheme() == "https" && to.scheme() != "https" {
        return Err(GitError::new(
            ErrorCode::GenericError,
            ErrorClass::Http,
            format!(
                "refusing a redirect ({status}) from https to {}",
                to.scheme()
            ),
        ));
    }
    let _ = to.set_username("");
    let _ = to.set_password(None);
    Ok(to)
}

/// `base` with `tail` (a path and query) after its path, as Git appends to a repository URL.
fn join(base: &Url, tail: &str) -> Url {
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
    let mut url = base.clone();
    let joined = format!("{}/{path}", base.path().trim_end_matches('/'));
    url.set_path(&joined);
    url.set_query((!query.is_empty()).then_some(query));
    url
}

/// A response that is not a `200` of `content_type`: the error libgit2 reports. A 403 is the
/// server refusing the credentials or the repository (`Auth`), a 404 a repository that is not
/// there; a `200` of another type is a server that does not speak smart HTTP.
fn check_status(response: &Response, content_type: &str) -> Result<(), GitError> {
    let status = response.status();
    if status == StatusCode::FORBIDDEN {
        return Err(auth_error("the server refused access (403)"));
    }
    if status != StatusCode::OK {
        return Err(GitError::new(
            ErrorCode::GenericError,
            ErrorClass::Http,
            format!("unexpected HTTP status {status}"),
        ));
    }
    let got = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    // The media type alone: parameters (`; charset=utf-8`) are ignored, as git does.
    let media_type = got.split(';').next().unwrap_or_default().trim();
    if !media_type.eq_ignore_ascii_case(content_type) {
        return Err(GitError::new(
            ErrorCode::GenericError,
            ErrorClass::Http,
            format!(
                "the server answered with `{got}`, not `{content_type}`: not a smart HTTP Git server (the dumb protocol is not supported)"
            ),
        ));
    }
    Ok(())
}

/// A response body read by libgit2, a read at a time: each read first checks the fetch's
/// cancel flag, and a body longer than `limit` is an error. Writing to it is an error (nothing
/// is sent after the advertisement's request).
struct Body {
    response: Response,
    cancel: Option<Arc<AtomicBool>>,
    read: u64,
    limit: Option<u64>,
}

impl Read for Body {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read_checked(
            &mut self.response,
            buf,
            self.cancel.as_deref(),
            &mut self.read,
            self.limit,
        )
    }
}

/// One read of a response for libgit2: refused once `cancel` is set or `limit` bytes were
/// read; an error names its cause (a read timeout says it timed out).
fn read_checked(
    response: &mut Response,
    buf: &mut [u8],
    cancel: Option<&AtomicBool>,
    read: &mut u64,
    limit: Option<u64>,
) -> io::Result<usize> {
    if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
        return Err(io::Error::other("the fetch was cancelled (its timeout)"));
    }
    if let Some(limit) = limit
        && *read > limit
    {
        return Err(io::Error::other(format!(
            "the server's list of refs is longer than {} MiB",
            limit >> 20
        )));
    }
    let n = response
        .read(buf)
        .map_err(|e| io::Error::new(e.kind(), chain(&e)))?;
    *read += n as u64;
    Ok(n)
}

impl Write for Body {
    fn write(&mut self, _buf: &[u8]) -> io::Result<usize> {
        Err(io::Error::other("nothing is written after a GET"))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One `POST {base}/git-upload-pack`: what libgit2 writes is its body, sent at its first read.
struct Post {
    shared: Arc<Shared>,
    base: Url,
    request: Vec<u8>,
    response: Option<Response>,
    read: u64,
}

impl Read for Post {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let cancel = self.shared.context.cancel.clone();
        if cancel.as_deref().is_some_and(|c| c.load(Ordering::Relaxed)) {
            return Err(io::Error::other("the fetch was cancelled (its timeout)"));
        }
        if self.response.is_none() {
            let url = join(&self.base, "git-upload-pack");
            let body = std::mem::take(&mut self.request);
            let response = self
                .shared
                .send(&url, |client, url| {
                    client
                        .post(url)
                        .header(
                            header::CONTENT_TYPE,
                            HeaderValue::from_static("application/x-git-upload-pack-request"),
                        )
                        .header(
                            header::ACCEPT,
                            HeaderValue::from_static("application/x-git-upload-pack-result"),
                        )
                        .body(body.clone())
                })
                .and_then(|r| {
                    check_status(&r, "application/x-git-upload-pack-result")?;
                    Ok(r)
                })
                .map_err(|e| io::Error::other(e.message().to_string()))?;
            self.response = Some(response);
        }
        match &mut self.response {
            // The pack has no bound of its own: libgit2 writes it to disk as it comes, and the
            // fetch's timeout ends it.
            Some(r) => read_checked(r, buf, cancel.as_deref(), &mut self.read, None),
            None => Ok(0),
        }
    }
}

impl Write for Post {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.request.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_resolve_lose_credentials_and_never_leave_tls() {
        let from =
            Url::parse("https://h.example/a/web.git/info/refs?service=git-upload-pack").unwrap();
        let found = StatusCode::FOUND;
        let to = |l: &str| redirect_target(&from, Some(l), found);
        assert_eq!(
            to("/b/web.git/info/refs?service=git-upload-pack")
                .unwrap()
                .as_str(),
            "https://h.example/b/web.git/info/refs?service=git-upload-pack"
        );
        assert_eq!(
            to("https://u:pw@other.example/web.git/info/refs")
                .unwrap()
                .as_str(),
            "https://other.example/web.git/info/refs"
        );
        let e = to("http://h.example/a/web.git/info/refs").unwrap_err();
        assert!(e.message().contains("from https to http"), "{e}");
        assert!(redirect_target(&from, None, found).is_err());
        // Plain HTTP may go to TLS.
        let plain = Url::parse("http://h.example/web.git/info/refs").unwrap();
        assert_eq!(
            redirect_target(&plain, Some("https://h.example/web.git/info/refs"), found)
                .unwrap()
                .scheme(),
            "https"
        );
    }

    #[test]
    fn paths_are_appended_to_the_repository_url() {
        let base = Url::parse("https://git.example.com/acme/web.git").unwrap();
        assert_eq!(
            join(&base, "info/refs?service=git-upload-pack").as_str(),
            "https://git.example.com/acme/web.git/info/refs?service=git-upload-pack"
        );
        let slash = Url::parse("https://git.example.com/acme/web/").unwrap();
        assert_eq!(
            join(&slash, "git-upload-pack").as_str(),
            "https://git.example.com/acme/web/git-upload-pack"
        );
    }

    fn shared(auth: Option<Auth>) -> Shared {
        Shared {
            context: Context { auth, cancel: None },
            state: Mutex::default(),
        }
    }

    #[test]
    fn credentials_come_from_the_url_else_from_source_auth() {
        let auth = Auth {
            secret: Some(SecretString::from("tok".to_string())),
            ..Default::default()
        };
        // The URL's user and password win, decoded; the URL keeps neither.
        let (url, creds) = shared(Some(auth.clone()))
            .split("https://bob:p%40ss@h.example/r.git")
            .unwrap();
        assert_eq!(url.as_str(), "https://h.example/r.git");
        let (user, password) = creds.unwrap();
        assert_eq!((user.as_str(), password.expose_secret()), ("bob", "p@ss"));
        // A user alone in the URL names the user of source.auth's secret.
        let (url, creds) = shared(Some(auth.clone()))
            .split("https://bob@h.example/r.git")
            .unwrap();
        assert_eq!(url.as_str(), "https://h.example/r.git");
        let (user, password) = creds.unwrap();
        assert_eq!((user.as_str(), password.expose_secret()), ("bob", "tok"));
        // Else `git`, as for every Git host's tokens.
        let (_, creds) = shared(Some(auth)).split("https://h.example/r.git").unwrap();
        assert_eq!(creds.unwrap().0, "git");
        assert!(
            shared(None)
                .split("https://h.example/r.git")
                .unwrap()
                .1
                .is_none()
        );
    }

    #[test]
    fn a_scope_sets_the_context_of_its_thread_and_puts_the_last_one_back() {
        let auth = |u: &str| Auth {
            username: Some(u.into()),
            ..Default::default()
        };
        let user = || CONTEXT.with(|c| c.borrow().auth.as_ref().and_then(|a| a.username.clone()));
        assert_eq!(user(), None);
        let cancel = Arc::new(AtomicBool::new(false));
        let outer = Scope::enter(Some(&auth("a")), cancel.clone());
        {
            let _inner = Scope::enter(Some(&auth("b")), cancel.clone());
            assert_eq!(user().as_deref(), Some("b"));
        }
        assert_eq!(user().as_deref(), Some("a"));
        drop(outer);
        assert_eq!(user(), None);
    }
}
