//! Test certificates made with the `openssl` command: one CA per folder and certificates it
//! signs (P-256 keys, valid for two days). Used by the etcd TLS tests and the Kubernetes
//! control plane.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A certificate authority whose files (`ca.pem`, `ca.key`) live in one folder, with every
/// certificate it signs beside them.
pub struct Pki {
    dir: PathBuf,
}

/// P-256 key flags for `openssl req`.
const EC: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-nodes",
];

impl Pki {
    /// Makes a new CA (`ca.pem`, `ca.key`) in `dir`.
    pub fn new(dir: &Path) -> Self {
        let pki = Pki {
            dir: dir.to_path_buf(),
        };
        let mut ca = vec!["req", "-x509"];
        ca.extend(EC);
        ca.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=test-ca",
        ]);
        ca.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
        ca.extend(["-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
        pki.openssl(&ca);
        pki
    }

    /// The path of a file in the CA's folder.
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// The CA certificate (PEM).
    pub fn ca(&self) -> PathBuf {
        self.path("ca.pem")
    }

    /// Issues `<name>.pem` and `<name>.key` for `subject` (`/O=group/CN=user`) with the given
    /// extensions, one `key=value` a line of an OpenSSL extension file.
    pub fn issue(&self, name: &str, subject: &str, extensions: &str) -> (PathBuf, PathBuf) {
        let (key, csr, pem, ext) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("{name}.ext"),
        );
        std::fs::write(self.dir.join(&ext), extensions).unwrap();
        let mut req = vec!["req"];
        req.extend(EC);
        req.extend(["-keyout", &key, "-out", &csr, "-subj", subject]);
        self.openssl(&req);
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &ext,
        ]);
        (self.path(&pem), self.path(&key))
    }

    /// A server certificate for 127.0.0.1 and `localhost`.
    pub fn server(&self, name: &str) -> (PathBuf, PathBuf) {
        self.issue(
            name,
            "/CN=127.0.0.1",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth",
        )
    }

    /// A client certificate for `subject`.
    pub fn client(&self, name: &str, subject: &str) -> (PathBuf, PathBuf) {
        self.issue(name, subject, "extendedKeyUsage=clientAuth")
    }

    /// A bare P-256 key pair, `<name>.key` (private) and `<name>.pub` (public), as a
    /// service-account token signer wants.
    pub fn key_pair(&self, name: &str) -> (PathBuf, PathBuf) {
        let (key, public) = (format!("{name}.key"), format!("{name}.pub"));
        self.openssl(&[
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
            &key,
        ]);
        self.openssl(&["ec", "-in", &key, "-pubout", "-out", &public]);
        (self.path(&key), self.path(&public))
    }

    fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&self.dir)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
