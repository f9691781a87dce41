//! Certificates for the TLS tests, made with `openssl` in a directory of
//! their own: a CA, a server certificate for 127.0.0.1 signed by it, a
//! client certificate signed by it, and a second CA that signed nothing
//! the servers use (the "wrong CA").

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The files [`Certificates::make`] writes, each a PEM file.
pub struct Certificates {
    /// The directory that holds them, removed on drop.
    pub dir: PathBuf,
    /// The CA that signed the server's and the client's certificates.
    pub ca: PathBuf,
    /// A CA of its own that signed nothing here.
    pub other_ca: PathBuf,
    /// The server's certificate (for `IP:127.0.0.1` and `DNS:localhost`).
    pub server_cert: PathBuf,
    /// The server's private key.
    pub server_key: PathBuf,
    /// The client's certificate (`CN=locks`).
    pub client_cert: PathBuf,
    /// The client's private key.
    pub client_key: PathBuf,
}

impl Certificates {
    /// Makes every certificate in a fresh directory under the system's
    /// temporary one.
    pub fn make() -> io::Result<Certificates> {
        let dir = std::env::temp_dir().join(format!("lock-certs-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir)?;
        let certs = Certificates {
            ca: dir.join("ca.crt"),
            other_ca: dir.join("other-ca.crt"),
            server_cert: dir.join("server.crt"),
            server_key: dir.join("server.key"),
            client_cert: dir.join("client.crt"),
            client_key: dir.join("client.key"),
            dir,
        };
        let run = |args: &[&str]| openssl(&certs.dir, args);
        for (name, cn) in [("ca", "lock-core test CA"), ("other-ca", "another CA")] {
            run(&[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN={cn}"),
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.crt"),
            ])?;
        }
        std::fs::write(
            certs.dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        )?;
        std::fs::write(
            certs.dir.join("client.ext"),
            "extendedKeyUsage=clientAuth\n",
        )?;
        for (name, cn) in [("server", "127.0.0.1"), ("client", "locks")] {
            run(&[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                &format!("/CN={cn}"),
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
            ])?;
            run(&[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &format!("{name}.ext"),
                "-out",
                &format!("{name}.crt"),
            ])?;
        }
        Ok(certs)
    }

    /// Another client certificate and key for `name`, signed by the same CA
    /// (a renewal: its own serial number), written as `<file>.crt` and
    /// `<file>.key`; returns their paths.
    pub fn another_client(&self, name: &str, file: &str) -> io::Result<(PathBuf, PathBuf)> {
        let (key, csr, cert) = (
            format!("{file}.key"),
            format!("{file}.csr"),
            format!("{file}.crt"),
        );
        openssl(
            &self.dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                &format!("/CN={name}"),
                "-keyout",
                &key,
                "-out",
                &csr,
            ],
        )?;
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "client.ext",
                "-out",
                &cert,
            ],
        )?;
        Ok((self.dir.join(cert), self.dir.join(key)))
    }

    /// A line of the client key's body: what no output may ever show.
    pub fn key_line(&self) -> String {
        let key = std::fs::read_to_string(&self.client_key).unwrap_or_default();
        key.lines()
            .find(|line| !line.starts_with("-----") && line.len() > 40)
            .unwrap_or("(no key line)")
            .to_owned()
    }

    /// `path` as text, for a URL or a command line.
    pub fn text(path: &Path) -> String {
        path.display().to_string()
    }
}

impl Drop for Certificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether `openssl` can be run.
pub fn openssl_installed() -> bool {
    Command::new("openssl")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

fn openssl(dir: &Path, args: &[&str]) -> io::Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}
