//! A real etcd server for the tests: the `etcd` 3.6 binary `scripts/test` builds, on free loopback
//! ports with its own data folder, stopped and started again at will.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The shared server `.ci/run` starts, when it did: `DRIFTLESS_TEST_ETCD=http://127.0.0.1:port`.
pub fn shared_endpoint() -> Option<String> {
    std::env::var("DRIFTLESS_TEST_ETCD")
        .ok()
        .filter(|s| !s.trim().is_empty())
}

/// A fresh directory for an etcd member's data: in memory (`/dev/shm`) when the machine has
/// it. etcd fsyncs its WAL on every write; on a disk still flushing a cold build's gigabytes,
/// one fsync can stall for seconds, longer than the 2 s leases the replica tests use, and the
/// tests would measure the disk rather than driftless. A test member keeps nothing worth a disk.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn data_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(d) = tempfile::Builder::new()
            .prefix("driftless-etcd")
            .tempdir_in(shm)
    {
        return d;
    }
    tempfile::tempdir().unwrap()
}

/// One etcd member on loopback.
pub struct EtcdServer {
    pub client_port: u16,
    peer_port: u16,
    pub dir: tempfile::TempDir,
    child: Option<Child>,
    extra: Vec<String>,
    /// `https` when started with TLS flags.
    scheme: &'static str,
}

impl EtcdServer {
    /// Starts a fresh single-member cluster and waits until it answers.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts one with extra command-line flags (e.g. `--max-txn-ops=8`).
    pub fn start_with(extra: &[&str]) -> Self {
        let mut s = EtcdServer {
            client_port: free_port(),
            peer_port: free_port(),
            dir: data_dir(),
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            scheme: if extra.iter().any(|f| f.starts_with("--cert-file")) {
                "https"
            } else {
                "http"
            },
        };
        s.resume();
        s
    }

    pub fn endpoint(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme, self.client_port)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Starts the server again on the same ports and data (after [`EtcdServer::kill`]).
    pub fn resume(&mut self) {
        assert!(self.child.is_none(), "etcd is already running");
        let bin = which_etcd();
        let client = self.endpoint();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let child = Command::new(bin)
            .args(["--name", "test"])
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("test={peer}")])
            .args(["--log-level", "warn"])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd starts");
        self.child = Some(child);
        let start = Instant::now();
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", self.client_port)).is_ok()
                && (self.scheme == "https" || health(self.client_port))
            {
                return;
            }
            if let Some(c) = &mut self.child
                && let Ok(Some(status)) = c.try_wait()
            {
                panic!("etcd exited with {status}:\n{}", self.log());
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "etcd did not come up within 30 s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills the server at once (SIGKILL): its clients see connections fail.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// True when `GET /health` answers `"health":"true"`.
fn health(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body.contains("\"health\":\"true\"")
}

/// The etcd binary: `ETCD_BIN` (which `scripts/test` sets to the etcd 3.6 it builds from
/// `tools/etcd`), else `etcd` on the PATH. Fails the test when there is none: a missing server
/// must not turn into a skipped test. (Self-contained: the benchmark includes this file alone.)
pub fn which_etcd() -> String {
    if let Some(b) = std::env::var_os("ETCD_BIN").filter(|b| !b.is_empty()) {
        return b.to_string_lossy().into_owned();
    }
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = std::path::Path::new(dir).join("etcd");
        if p.is_file() {
            return p.to_string_lossy().into_owned();
        }
    }
    panic!(
        "no `etcd` binary: run the tests through `scripts/test`, which builds etcd 3.6 from \
         tools/etcd and sets ETCD_BIN, or set ETCD_BIN"
    );
}
