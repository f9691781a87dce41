//! Real memcached servers for the tests: found through `MEMCACHED_URL`, or
//! started with `memcached` from `PATH` on a free port (see
//! [`server`](crate::server)). Without either the tests skip loudly, and
//! under `CI=true` they fail.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use lock_core::{LockManager, MemcachedStore};

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
    if !installed("memcached") {
        return unavailable(
            "a test that needs a memcached server of its own",
            "memcached is not on PATH (apt-get install memcached)",
        );
    }
    Some(start_server_with(extra).unwrap_or_else(|e| panic!("starting memcached: {e}")))
}

fn start_server() -> io::Result<Server> {
    start_server_with(&[])
}

fn start_server_with(extra: &[&str]) -> io::Result<Server> {
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
    Server::start("memcached", &args, ready)
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
