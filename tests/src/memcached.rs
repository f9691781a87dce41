//! Real memcached servers for the tests: found through `MEMCACHED_URL`, or
//! started with `memcached` from `PATH` on a free port (see
//! [`server`](crate::server)). Without either the tests skip loudly, and
//! under `CI=true` they fail. A memcached serving TLS ([`start_tls`],
//! [`memcached_tls`]) is always one the tests start, with certificates they
//! make.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use lock_core::{LockManager, MemcachedStore};

use crate::certs::{Certificates, openssl_installed};
use crate::harness::unavailable;
use crate::server::{Server, installed};

/// Answers when memcached on `port` speaks the meta protocol.
pub fn ready(port: u16) -> io::Result<()> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(b"mg lock-tests-probe t\r\n")?;
    let mut reply = [0u8; 4];
    stream.read_exact(&mut reply)?;
    if &reply == b"EN\r\n" {
        Ok(())
    } else {
        Err(io::Error::other(format!("answered {reply:?}")))
    }
}

/// A memcached of the test's own, on a free port, or `None` (after the
/// notice) when `memcached` is not installed.
pub fn start() -> Option<Server> {
    start_with(&[])
}

/// As [`start`], with `extra` arguments for memcached (`["-C"]`: no CAS).
pub fn start_with(extra: &[&str]) -> Option<Server> {
    start_with_env(extra, &[])
}

/// As [`start_with`], with `env` added to memcached's environment, at this
/// start and every [`Server::restart`]: a
/// [`ServerClock`](crate::server_clock::ServerClock)'s, say (which moves
/// only the `time` reported by a memcached started after the move, never
/// when its items expire: see [`server_clock`](crate::server_clock)).
pub fn start_with_env(extra: &[&str], env: &[(String, String)]) -> Option<Server> {
    if !installed("memcached") {
        return unavailable(
            "a test that needs a memcached server of its own",
            "memcached is not on PATH (apt-get install memcached)",
        );
    }
    Some(start_server_with(extra, env).unwrap_or_else(|e| panic!("starting memcached: {e}")))
}

fn start_server() -> io::Result<Server> {
    start_server_with(&[], &[])
}

fn start_server_with(extra: &[&str], env: &[(String, String)]) -> io::Result<Server> {
    start_server_with_ready(extra, env, ready)
}

fn start_server_with_ready(
    extra: &[&str],
    env: &[(String, String)],
    ready: impl Fn(u16) -> io::Result<()>,
) -> io::Result<Server> {
    // memcached refuses to run as root unless told which user to be.
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.starts_with(b"0"));
    let mut args = vec![
        "-p",
        "{port}",
        "-l",
        "127.0.0.1",
        "-U",
        "0",
        "-t",
        "2",
        "-m",
        "64",
    ];
    if root {
        args.extend(["-u", "root"]);
    }
    args.extend(extra);
    Server::start_with_env("memcached", &args, env, ready)
}

/// `memcache://127.0.0.1:<port>` of `server`.
pub fn url(server: &Server) -> String {
    format!("memcache://127.0.0.1:{}", server.port)
}

/// The URL of the memcached shared by this test binary, or `None` (after
/// the notice).
pub fn memcached_url() -> Option<String> {
    static SHARED: OnceLock<Result<String, String>> = OnceLock::new();
    let shared = SHARED.get_or_init(|| {
        let found = (|| {
            if let Ok(url) = std::env::var("MEMCACHED_URL") {
                return Ok((url.clone(), format!("MEMCACHED_URL {url}")));
            }
            if !installed("memcached") {
                return Err(
                    "MEMCACHED_URL is not set and memcached is not on PATH (apt-get install memcached)"
                        .to_owned(),
                );
            }
            let server = start_server().map_err(|e| format!("memcached: {e}"))?;
            let url = url(&server);
            // Lives until the process ends; the watchdog then stops it.
            std::mem::forget(server);
            Ok((url.clone(), format!("a memcached of its own at {url}")))
        })();
        crate::harness::announce(
            "memcached",
            &found.as_ref().map(|(_, what)| what.clone()).map_err(Clone::clone),
        );
        found.map(|(url, _)| url)
    });
    match shared {
        Ok(url) => Some(url.clone()),
        Err(why) => unavailable("memcached tests", why),
    }
}

/// A manager over a fresh store on the shared memcached.
pub async fn memcached_manager() -> Option<LockManager> {
    let url = memcached_url()?;
    Some(LockManager::new(
        MemcachedStore::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("connecting to {url}: {e}")),
    ))
}

/// A memcached that speaks only TLS and wants a client certificate signed
/// by its CA (`-Z -o ssl_verify_mode=2`), and the files a client needs to
/// reach it (or to fail to), kept in the server's directory: they live as
/// long as it does.
#[derive(Clone, Debug)]
pub struct TlsMemcached {
    /// The port it listens on, for TLS only.
    pub port: u16,
    /// The CA that signed its certificate and the client's.
    pub ca: PathBuf,
    /// A CA that signed neither.
    pub other_ca: PathBuf,
    /// A client certificate it trusts.
    pub client_cert: PathBuf,
    /// The client certificate's key.
    pub client_key: PathBuf,
}

impl TlsMemcached {
    /// `memcaches://127.0.0.1:<port>` with every certificate it needs in
    /// the query.
    pub fn url(&self) -> String {
        format!(
            "memcaches://127.0.0.1:{}?sslrootcert={}&sslcert={}&sslkey={}",
            self.port,
            self.ca.display(),
            self.client_cert.display(),
            self.client_key.display()
        )
    }
}

/// Answers when the TLS memcached on `port` completes a handshake in which
/// both sides' certificates check out.
fn tls_ready(port: u16, ca: &Path, client_cert: &Path, client_key: &Path) -> io::Result<()> {
    let status = Command::new("openssl")
        .args(["s_client", "-brief", "-verify_return_error", "-connect"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("-CAfile")
        .arg(ca)
        .arg("-cert")
        .arg(client_cert)
        .arg("-key")
        .arg(client_key)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("openssl s_client: {status}")))
    }
}

/// A memcached of the test's own serving TLS on a free port (see
/// [`TlsMemcached`]), or `None` (after the notice) when `memcached` or
/// `openssl` is not installed.
pub fn start_tls() -> Option<(Server, TlsMemcached)> {
    if !installed("memcached") || !openssl_installed() {
        return unavailable(
            "a test that needs a memcached serving TLS",
            "memcached or openssl is not on PATH (apt-get install memcached openssl)",
        );
    }
    Some(start_tls_server().unwrap_or_else(|e| panic!("starting memcached with TLS: {e}")))
}

fn start_tls_server() -> io::Result<(Server, TlsMemcached)> {
    let certs = Certificates::make()?;
    let options = format!(
        "ssl_chain_cert={},ssl_key={},ssl_ca_cert={},ssl_verify_mode=2",
        certs.server_cert.display(),
        certs.server_key.display(),
        certs.ca.display()
    );
    let server = start_server_with_ready(&["-Z", "-o", &options], &[], |port| {
        tls_ready(port, &certs.ca, &certs.client_cert, &certs.client_key)
    })?;
    // memcached has read its own files; the client's move to the server's
    // directory, removed with it, and the rest go with `certs`.
    let copy = |from: &Path| -> io::Result<PathBuf> {
        let to = server.dir().join(from.file_name().unwrap_or_default());
        std::fs::copy(from, &to)?;
        Ok(to)
    };
    let tls = TlsMemcached {
        port: server.port,
        ca: copy(&certs.ca)?,
        other_ca: copy(&certs.other_ca)?,
        client_cert: copy(&certs.client_cert)?,
        client_key: copy(&certs.client_key)?,
    };
    Ok((server, tls))
}

/// The TLS memcached shared by this test binary, or `None` (after the
/// notice).
pub fn memcached_tls() -> Option<TlsMemcached> {
    static SHARED: OnceLock<Result<TlsMemcached, String>> = OnceLock::new();
    let shared = SHARED.get_or_init(|| {
        let found = (|| {
            if !installed("memcached") || !openssl_installed() {
                return Err(
                    "memcached or openssl is not on PATH (apt-get install memcached openssl)"
                        .to_owned(),
                );
            }
            let (server, tls) =
                start_tls_server().map_err(|e| format!("memcached with TLS: {e}"))?;
            // Lives until the process ends; the watchdog then stops it and
            // removes its directory, the certificates with it.
            std::mem::forget(server);
            let what = format!("a memcached of its own serving TLS on port {}", tls.port);
            Ok((tls, what))
        })();
        crate::harness::announce(
            "memcached over TLS",
            &found
                .as_ref()
                .map(|(_, what)| what.clone())
                .map_err(Clone::clone),
        );
        found.map(|(tls, _)| tls)
    });
    match shared {
        Ok(tls) => Some(tls.clone()),
        Err(why) => unavailable("memcached TLS tests", why),
    }
}
