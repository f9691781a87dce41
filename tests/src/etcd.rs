//! Real etcd for the tests: `ETCD_URL` (comma-separated client URLs), or
//! members started with `etcd` from `PATH` on free ports (see
//! [`server`](crate::server)): one for the shared suites, a three-member
//! cluster for the failover tests. Without either the tests skip loudly,
//! and under `CI=true` they fail.
//!
//! [`start_tls`] starts a member of its own that speaks only TLS to its
//! clients and asks each for a certificate, for the TLS tests.
//!
//! A cluster's Raft leader is found with
//! [`EtcdCluster::leader_index`] (each member's status from etcd's HTTP
//! gateway), so a test can kill or restart exactly the leader.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use lock_core::{EtcdStore, LockManager};

use crate::certs::{Certificates, openssl_installed};
use crate::harness::{free_port, unavailable};
use crate::kept::KeptDir;
use crate::server::{Server, installed};

/// The arguments of one member named `name`, on `{port}` and `{peer}`, in
/// the cluster `initial` (`name=http://127.0.0.1:peer,...`), keeping its
/// data in `data`.
fn member_args(name: &str, initial: &str, data: &str) -> Vec<String> {
    [
        "--name",
        name,
        "--data-dir",
        data,
        "--listen-client-urls",
        "http://127.0.0.1:{port}",
        "--advertise-client-urls",
        "http://127.0.0.1:{port}",
        "--listen-peer-urls",
        "http://127.0.0.1:{peer}",
        "--initial-advertise-peer-urls",
        "http://127.0.0.1:{peer}",
        "--initial-cluster",
        initial,
        "--initial-cluster-state",
        "new",
        "--log-level",
        "error",
    ]
    .iter()
    .map(|arg| (*arg).to_owned())
    .collect()
}

/// Answers when the member on `port` accepts connections.
fn listening(port: u16) -> io::Result<()> {
    TcpStream::connect(("127.0.0.1", port)).map(drop)
}

/// Answers when the member on `port` says it is healthy (it has a leader).
pub fn healthy(port: u16) -> io::Result<()> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    if reply.contains("\"health\":\"true\"") {
        Ok(())
    } else {
        Err(io::Error::other(format!("not healthy: {reply}")))
    }
}

/// What the member on `port` says of itself (`POST /v3/maintenance/status`
/// on etcd's HTTP gateway): its own member id and its leader's, as the
/// decimal strings the gateway writes. The leader is `None` while the member
/// knows of none (the gateway writes `"0"`, or leaves the field out).
pub fn member_status(port: u16) -> io::Result<(String, Option<String>)> {
    let timeout = Duration::from_secs(2);
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let asked = || format!("POST /v3/maintenance/status to the member on {port}");
    let mut stream = TcpStream::connect_timeout(&address, timeout)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: connecting: {e}", asked())))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream
        .write_all(
            b"POST /v3/maintenance/status HTTP/1.0\r\nHost: 127.0.0.1\r\n\
              Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
        )
        .map_err(|e| io::Error::new(e.kind(), format!("{}: sending: {e}", asked())))?;
    let mut reply = String::new();
    stream
        .read_to_string(&mut reply)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: reading the reply: {e}", asked())))?;
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        return Err(io::Error::other(format!("{}: answered {reply:?}", asked())));
    }
    let member = json_number(body, "member_id")
        .ok_or_else(|| io::Error::other(format!("{}: no member_id in {body:?}", asked())))?;
    let leader = json_number(body, "leader").filter(|leader| leader != "0");
    Ok((member, leader))
}

/// The value of the first `"key":` in `json`, a number or a string holding
/// one (the gateway writes 64-bit integers as strings), without its quotes.
fn json_number(json: &str, key: &str) -> Option<String> {
    let after = &json[json.find(&format!("\"{key}\""))? + key.len() + 2..];
    let value = after.trim_start().strip_prefix(':')?.trim_start();
    let value = value.strip_prefix('"').unwrap_or(value);
    let digits: String = value.chars().take_while(char::is_ascii_digit).collect();
    (!digits.is_empty()).then_some(digits)
}

/// Waits (up to 30 s) until every member on `ports` reports a leader.
fn wait_healthy(ports: &[u16]) -> io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    for port in ports {
        loop {
            match healthy(*port) {
                Ok(()) => break,
                Err(e) if Instant::now() >= deadline => {
                    return Err(io::Error::other(format!("member on {port}: {e}")));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
    Ok(())
}

/// Starts one etcd member that serves its clients over TLS only
/// (`https://127.0.0.1:<port>`) with the server certificate of `certs`,
/// and asks every client for a certificate signed by their CA
/// (`--client-cert-auth`); waits until it reports a leader (asked over
/// TLS, with the client certificate). `None` (after the notice) when etcd
/// or openssl is missing; a member that does not come up panics.
pub fn start_tls(certs: &Certificates) -> Option<Server> {
    if !installed("etcd") {
        return unavailable(
            "the etcd TLS tests",
            "etcd is not on PATH (apt-get install etcd-server)",
        );
    }
    if !openssl_installed() {
        return unavailable(
            "the etcd TLS tests",
            "openssl is not on PATH (apt-get install openssl)",
        );
    }
    let file = |path: &std::path::Path| Certificates::text(path);
    let (cert, key, ca) = (
        file(&certs.server_cert),
        file(&certs.server_key),
        file(&certs.ca),
    );
    let mut args = member_args("m0", "m0=http://127.0.0.1:{peer}", "{dir}/data");
    for arg in &mut args {
        // The clients' side over TLS; the (unused) peer side stays plain.
        if arg == "http://127.0.0.1:{port}" {
            *arg = "https://127.0.0.1:{port}".to_owned();
        }
    }
    args.extend(
        [
            "--cert-file",
            &cert,
            "--key-file",
            &key,
            "--trusted-ca-file",
            &ca,
            "--client-cert-auth",
        ]
        .map(str::to_owned),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = Server::start("etcd", &args, listening).and_then(|server| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match healthy_tls(server.port, certs) {
                Ok(()) => return Ok(server),
                Err(e) if Instant::now() >= deadline => {
                    return Err(io::Error::other(format!(
                        "the TLS member on {}: {e}",
                        server.port
                    )));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    });
    Some(started.unwrap_or_else(|e| panic!("starting etcd with TLS: {e}")))
}

/// Answers when the TLS member on `port` says it is healthy (it has a
/// leader): `GET /health` through `openssl s_client`, trusting the CA of
/// `certs` and presenting their client certificate.
pub fn healthy_tls(port: u16, certs: &Certificates) -> io::Result<()> {
    let mut child = Command::new("openssl")
        .args(["s_client", "-quiet", "-ign_eof", "-connect"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("-CAfile")
        .arg(&certs.ca)
        .arg("-cert")
        .arg(&certs.client_cert)
        .arg("-key")
        .arg(&certs.client_key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let request = b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(request)?;
    }
    // The member closes the connection after its answer; one that does
    // not answer is given up on after a few seconds.
    let deadline = Instant::now() + Duration::from_secs(5);
    while child.try_wait()?.is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::other("no answer to GET /health within 5 s"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut reply = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        stdout.read_to_string(&mut reply)?;
    }
    if reply.contains("\"health\":\"true\"") {
        Ok(())
    } else {
        Err(io::Error::other(format!("not healthy: {reply:?}")))
    }
}

/// `http://127.0.0.1:<port>`.
pub fn url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

/// The client URLs of the etcd shared by this test binary, or `None`
/// (after the notice).
pub fn etcd_endpoints() -> Option<Vec<String>> {
    static SHARED: OnceLock<Result<Vec<String>, String>> = OnceLock::new();
    let shared = SHARED.get_or_init(|| {
        let found = (|| {
            if let Ok(urls) = std::env::var("ETCD_URL") {
                let urls: Vec<String> = urls.split(',').map(|url| url.trim().to_owned()).collect();
                let what = format!("ETCD_URL {}", urls.join(","));
                return Ok((urls, what));
            }
            if !installed("etcd") {
                return Err(
                    "ETCD_URL is not set and etcd is not on PATH (apt-get install etcd-server)"
                        .to_owned(),
                );
            }
            let cluster = EtcdCluster::start(1).map_err(|e| format!("etcd: {e}"))?;
            let urls = cluster.urls();
            // Lives until the process ends; the watchdog then stops it.
            std::mem::forget(cluster);
            let what = format!("an etcd member of its own at {}", urls.join(","));
            Ok((urls, what))
        })();
        crate::harness::announce(
            "etcd",
            &found
                .as_ref()
                .map(|(_, what)| what.clone())
                .map_err(Clone::clone),
        );
        found.map(|(urls, _)| urls)
    });
    match shared {
        Ok(urls) => Some(urls.clone()),
        Err(why) => unavailable("etcd tests", why),
    }
}

/// A manager over a fresh store on the shared etcd.
pub async fn etcd_manager() -> Option<LockManager> {
    let endpoints = etcd_endpoints()?;
    Some(LockManager::new(
        EtcdStore::connect(&endpoints)
            .await
            .unwrap_or_else(|e| panic!("connecting to {endpoints:?}: {e}")),
    ))
}

/// Members started by a test, each on a free port.
pub struct EtcdCluster {
    /// The members, in the order they were named (`m0`, `m1`...).
    pub members: Vec<Server>,
    /// Data directories kept apart from the members' own (which a restart
    /// empties), removed when the cluster is dropped; empty unless started
    /// with [`start_with_or_skip`](EtcdCluster::start_with_or_skip).
    kept: Vec<KeptDir>,
}

impl EtcdCluster {
    /// Starts `size` members forming one cluster, and waits until every one
    /// reports a leader. `None` (after the notice) when etcd is missing.
    pub fn start_or_skip(size: usize) -> Option<EtcdCluster> {
        if !installed("etcd") {
            return unavailable(
                "a test that needs an etcd cluster of its own",
                "etcd is not on PATH (apt-get install etcd-server)",
            );
        }
        Some(Self::start(size).unwrap_or_else(|e| panic!("starting etcd: {e}")))
    }

    /// Starts `size` members as [`start_or_skip`](EtcdCluster::start_or_skip)
    /// does, each with `extra` arguments after the usual ones (like
    /// `--auth-token-ttl 5`), and with data that survives
    /// [`restart`](EtcdCluster::restart): a restarted member still holds
    /// its keys, leases and revisions, as after a crash or a deploy.
    pub fn start_with_or_skip(size: usize, extra: &[&str]) -> Option<EtcdCluster> {
        if !installed("etcd") {
            return unavailable(
                "a test that needs an etcd cluster of its own",
                "etcd is not on PATH (apt-get install etcd-server)",
            );
        }
        Some(Self::start_kept(size, extra).unwrap_or_else(|e| panic!("starting etcd: {e}")))
    }

    /// Kills member `index` with `SIGKILL` and starts it again on the same
    /// ports and data, then waits until it reports a leader. Only for a
    /// cluster from [`start_with_or_skip`](EtcdCluster::start_with_or_skip)
    /// (the others' data is gone with the process).
    pub fn restart(&mut self, index: usize) -> io::Result<()> {
        assert!(
            self.kept.len() == self.members.len(),
            "restart keeps data only for a cluster from start_with_or_skip"
        );
        let member = &mut self.members[index];
        member.restart(listening)?;
        let port = member.port;
        wait_healthy(&[port])
    }

    fn start(size: usize) -> io::Result<EtcdCluster> {
        Self::launch(size, &[], false)
    }

    fn start_kept(size: usize, extra: &[&str]) -> io::Result<EtcdCluster> {
        Self::launch(size, extra, true)
    }

    fn launch(size: usize, extra: &[&str], keep: bool) -> io::Result<EtcdCluster> {
        let ports = (0..size)
            .map(|_| free_port())
            .collect::<io::Result<Vec<u16>>>()?;
        let initial = ports
            .iter()
            .enumerate()
            .map(|(i, port)| format!("m{i}=http://127.0.0.1:{}", port + 10_000))
            .collect::<Vec<_>>()
            .join(",");
        let mut members = Vec::with_capacity(size);
        let mut kept = Vec::new();
        for (i, port) in ports.iter().enumerate() {
            let data = if keep {
                let unique: u64 = rand::random();
                let dir = std::env::temp_dir().join(format!(
                    "lock-tests-etcd-data-{}-{port}-{unique:016x}",
                    std::process::id()
                ));
                let shown = dir.to_string_lossy().into_owned();
                kept.push(KeptDir::new(dir)?);
                shown
            } else {
                "{dir}/data".to_owned()
            };
            let mut args = member_args(&format!("m{i}"), &initial, &data);
            args.extend(extra.iter().map(|arg| (*arg).to_owned()));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            members.push(Server::start_at(*port, "etcd", &args, listening)?);
        }
        wait_healthy(&ports)?;
        Ok(EtcdCluster { members, kept })
    }

    /// How many members the cluster was started with (killed ones
    /// included).
    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    /// The index (in [`members`](EtcdCluster::members)) of the Raft leader:
    /// the member whose own id is the leader every answering member names
    /// ([`member_status`]).
    ///
    /// Fails, saying what each member answered, when none answers, when one
    /// knows of no leader (an election is under way), when they name
    /// different leaders, or when the leader named is not among those that
    /// answered. [`wait_for_leader`](EtcdCluster::wait_for_leader) retries
    /// until they agree.
    pub fn leader_index(&self) -> io::Result<usize> {
        let answers: Vec<io::Result<(String, Option<String>)>> = self
            .members
            .iter()
            .map(|member| member_status(member.port))
            .collect();
        let said = || {
            self.members
                .iter()
                .zip(&answers)
                .enumerate()
                .map(|(index, (member, answer))| match answer {
                    Ok((id, leader)) => format!(
                        "m{index} on {} is {id}, leader {}",
                        member.port,
                        leader.as_deref().unwrap_or("none")
                    ),
                    Err(e) => format!("m{index}: {e}"),
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        let mut leaders = answers
            .iter()
            .flatten()
            .map(|(_, leader)| leader.as_deref());
        let Some(first) = leaders.next() else {
            return Err(io::Error::other(format!(
                "no etcd member answered for its status: {}",
                said()
            )));
        };
        let Some(leader) = first.filter(|_| leaders.all(|other| other == first)) else {
            return Err(io::Error::other(format!(
                "the etcd members do not agree on a leader: {}",
                said()
            )));
        };
        answers
            .iter()
            .position(|answer| answer.as_ref().is_ok_and(|(id, _)| id == leader))
            .ok_or_else(|| {
                io::Error::other(format!(
                    "the etcd leader {leader} is not among the members that answered: {}",
                    said()
                ))
            })
    }

    /// Retries [`leader_index`](EtcdCluster::leader_index) until it gives a
    /// leader, or returns its last error once `guard` has passed: after a
    /// leader was killed or restarted, the members need an election (about a
    /// second with etcd's defaults) before they name the same one.
    pub fn wait_for_leader(&self, guard: Duration) -> io::Result<usize> {
        let deadline = Instant::now() + guard;
        loop {
            match self.leader_index() {
                Ok(index) => return Ok(index),
                Err(e) if Instant::now() >= deadline => {
                    return Err(io::Error::other(format!(
                        "no etcd leader within {guard:?}: {e}"
                    )));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Every member's client URL.
    pub fn urls(&self) -> Vec<String> {
        self.members.iter().map(|member| url(member.port)).collect()
    }
}
