//! Real Redis servers for the tests: found, or started on free ports.
//!
//! - [`redis_url`] / [`cluster_urls`]: a server (cluster) shared by every test
//!   of one test binary. `REDIS_URL` (`REDIS_CLUSTER_URLS`, comma-separated)
//!   points at an existing one; otherwise one is started with `redis-server`
//!   from `PATH`, in a temporary directory, on free ports.
//! - [`RedisServer::start`]: a server of the test's own, for tests that kill
//!   and restart it.
//! - [`RedisCluster::start_kept`]: a cluster of the test's own whose nodes
//!   can be killed, promoted away from and restarted as the same members.
//!
//! When neither is possible the tests print a loud notice and skip, except
//! under `CI=true`, where a skipped real-server test would hide a broken
//! setup: there it is a failure.
//!
//! # Servers never outlive the tests
//!
//! Each `redis-server` runs under a small `sh` watchdog whose standard input
//! is a pipe from the test process. When the test process ends, however it
//! ends (even `SIGKILL`), the pipe closes and the watchdog kills the server
//! and removes its directory. Servers a test owns are also killed on drop.
//! Directories a restart must find again (a cluster node's `nodes.conf`)
//! are [`KeptDir`]s instead: removed on drop, or by a watchdog of their own
//! when the test process ends.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use lock_core::{LockManager, RedisStore};

use crate::kept::KeptDir;

/// How long a started server may take to answer before the harness gives up.
const START_GUARD: Duration = Duration::from_secs(20);

/// Starts `redis-server` in the background, prints its pid, then waits for
/// its standard input to close and kills it (and removes its directory when
/// the first argument is `remove`).
const WATCHDOG: &str = r#"
cleanup="$1"; dir="$2"; shift 2
redis-server "$@" >/dev/null 2>&1 &
pid=$!
echo "$pid"
cat >/dev/null
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
if [ "$cleanup" = remove ]; then rm -rf "$dir"; fi
"#;

/// Says, once per test binary and suite, which server the suite runs
/// against (or why it is skipped): written straight to stderr, past the
/// test harness's capture, so a reader of the test output (CI's) knows
/// what was tested.
pub fn announce(suite: &str, outcome: &Result<String, String>) {
    let binary = std::env::current_exe()
        .ok()
        .and_then(|path| {
            path.file_stem()
                .map(|stem| stem.to_string_lossy().into_owned())
        })
        .map(|stem| {
            stem.rsplit_once('-')
                .map_or(stem.clone(), |(name, _)| name.to_owned())
        })
        .unwrap_or_default();
    let line = match outcome {
        Ok(what) => format!("[{binary}] {suite}: {what}"),
        Err(why) => format!("[{binary}] {suite}: SKIPPED: {why}"),
    };
    let mut err = io::stderr().lock();
    let _ = writeln!(err, "{}", shown(&line));
}

/// `text` without the password of any URL in it.
fn shown(text: &str) -> String {
    text.split(' ')
        .map(|word| match (word.find("://"), word.rfind('@')) {
            (Some(scheme), Some(at)) if at > scheme => {
                let userinfo = &word[scheme + 3..at];
                match userinfo.split_once(':') {
                    Some((user, _)) => {
                        format!("{}://{user}:***@{}", &word[..scheme], &word[at + 1..])
                    }
                    None => word.to_owned(),
                }
            }
            _ => word.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Says loudly that a real-server test cannot run, and skips it; under
/// `CI=true` fails it instead, so a broken CI setup cannot pass quietly.
pub fn unavailable<T>(what: &str, why: &str) -> Option<T> {
    let notice = format!(
        "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
         !!! SKIPPED: {what}\n\
         !!! {why}\n\
         !!! Install the server (apt-get install redis-server memcached) or set its URL\n\
         !!! (REDIS_URL, MEMCACHED_URL).\n\
         !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
    );
    if std::env::var("CI").is_ok_and(|ci| ci == "true") {
        panic!("{notice}under CI=true a real-server test must run, not skip");
    }
    eprintln!("{notice}");
    None
}

/// Whether `redis-server` can be run from `PATH`.
pub fn redis_server_installed() -> bool {
    Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// The URL of the single server shared by this test binary, or `None` (after
/// the notice) when there is none.
pub fn redis_url() -> Option<String> {
    static SHARED: OnceLock<Result<String, String>> = OnceLock::new();
    let shared = SHARED.get_or_init(|| {
        let found = (|| {
            if let Ok(url) = std::env::var("REDIS_URL") {
                return Ok((url.clone(), format!("REDIS_URL {url}")));
            }
            if !redis_server_installed() {
                return Err("REDIS_URL is not set and redis-server is not on PATH".to_owned());
            }
            let server = RedisServer::start_shared().map_err(|e| format!("redis-server: {e}"))?;
            let url = server.url();
            // Lives until the process ends; the watchdog then stops it.
            std::mem::forget(server);
            Ok((url.clone(), format!("a redis-server of its own at {url}")))
        })();
        announce(
            "Redis",
            &found
                .as_ref()
                .map(|(_, what)| what.clone())
                .map_err(Clone::clone),
        );
        found.map(|(url, _)| url)
    });
    match shared {
        Ok(url) => Some(url.clone()),
        Err(why) => unavailable("Redis tests", why),
    }
}

/// The seed URLs of the cluster shared by this test binary, or `None` (after
/// the notice).
pub fn cluster_urls() -> Option<Vec<String>> {
    static SHARED: OnceLock<Result<Vec<String>, String>> = OnceLock::new();
    let shared = SHARED.get_or_init(|| {
        let found = (|| {
            if let Ok(urls) = std::env::var("REDIS_CLUSTER_URLS") {
                let urls: Vec<String> = urls.split(',').map(|u| u.trim().to_owned()).collect();
                let what = format!("REDIS_CLUSTER_URLS {}", urls.join(","));
                return Ok((urls, what));
            }
            if !redis_server_installed() {
                return Err(
                    "REDIS_CLUSTER_URLS is not set and redis-server is not on PATH".to_owned(),
                );
            }
            let cluster = RedisCluster::start(3).map_err(|e| format!("redis cluster: {e}"))?;
            let urls = cluster.urls();
            std::mem::forget(cluster);
            let what = format!("a three-primary cluster of its own at {}", urls.join(","));
            Ok((urls, what))
        })();
        announce(
            "Redis Cluster",
            &found
                .as_ref()
                .map(|(_, what)| what.clone())
                .map_err(Clone::clone),
        );
        found.map(|(urls, _)| urls)
    });
    match shared {
        Ok(urls) => Some(urls.clone()),
        Err(why) => unavailable("Redis Cluster tests", why),
    }
}

/// A fresh store on the shared single server.
pub async fn redis_store() -> Option<RedisStore> {
    let url = redis_url()?;
    Some(
        RedisStore::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("connecting to {url}: {e}")),
    )
}

/// A manager over a fresh store on the shared single server.
pub async fn redis_manager() -> Option<LockManager> {
    redis_store().await.map(LockManager::new)
}

/// A fresh store on the shared cluster.
pub async fn cluster_store() -> Option<RedisStore> {
    let urls = cluster_urls()?;
    let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
    Some(
        RedisStore::cluster(&seeds)
            .await
            .unwrap_or_else(|e| panic!("connecting to cluster {urls:?}: {e}")),
    )
}

/// A manager over a fresh store on the shared cluster.
pub async fn cluster_manager() -> Option<LockManager> {
    cluster_store().await.map(LockManager::new)
}

/// A `redis-server` process this harness started.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    /// Added to the server's environment at every start, restarts included
    /// (the watchdog's shell gets it too, and does nothing with it).
    env: Vec<(String, String)>,
    /// Closing it makes the watchdog kill the server.
    watchdog: Option<(Child, ChildStdin)>,
    pid: u32,
}

impl RedisServer {
    /// A server of the caller's own, on a free port, or `None` (after the
    /// notice) when `redis-server` is not installed.
    pub fn start() -> Option<RedisServer> {
        Self::start_with(&[])
    }

    /// As [`start`](RedisServer::start), with extra `redis-server` arguments
    /// (for example `["--requirepass", "secret"]`).
    pub fn start_with(args: &[&str]) -> Option<RedisServer> {
        Self::start_with_env(args, &[])
    }

    /// As [`start_with`](RedisServer::start_with), with `env` added to the
    /// server's environment, at this start and every
    /// [`restart`](RedisServer::restart): a
    /// [`ServerClock`](crate::server_clock::ServerClock)'s, say.
    pub fn start_with_env(args: &[&str], env: &[(String, String)]) -> Option<RedisServer> {
        if !redis_server_installed() {
            return unavailable(
                "a test that needs a Redis server of its own",
                "redis-server is not on PATH (REDIS_URL alone is not enough for it)",
            );
        }
        let extra = args.iter().map(|a| (*a).to_owned()).collect();
        Some(
            Self::start_fresh(extra, env, Cleanup::OnDrop)
                .unwrap_or_else(|e| panic!("starting redis-server: {e}")),
        )
    }

    fn start_shared() -> io::Result<RedisServer> {
        Self::start_fresh(Vec::new(), &[], Cleanup::AtExit)
    }

    /// Starts on a fresh port, retrying with another port if one was taken
    /// between choosing and binding it.
    fn start_fresh(
        extra: Vec<String>,
        env: &[(String, String)],
        cleanup: Cleanup,
    ) -> io::Result<RedisServer> {
        let mut last = io::Error::other("no attempt made");
        for _ in 0..5 {
            let port = free_port()?;
            let dir = temp_dir(port)?;
            let mut server = RedisServer {
                port,
                dir,
                extra: extra.clone(),
                env: env.to_vec(),
                watchdog: None,
                pid: 0,
            };
            match server.launch(cleanup) {
                Ok(()) => return Ok(server),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn launch(&mut self, cleanup: Cleanup) -> io::Result<()> {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(WATCHDOG)
            .arg("sh")
            .arg(match cleanup {
                Cleanup::AtExit => "remove",
                Cleanup::OnDrop => "keep",
            })
            .arg(&self.dir)
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .args(["--save", "", "--appendonly", "no"])
            .args(&self.extra)
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = command.spawn()?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| io::Error::other("no stdin"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("no stdout"))?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        self.pid = line
            .trim()
            .parse()
            .map_err(|_| io::Error::other(format!("watchdog printed {line:?}, not a pid")))?;
        self.watchdog = Some((child, stdin));
        if let Err(e) = wait_until(START_GUARD, || ping(self.port)) {
            self.stop();
            let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
            return Err(io::Error::other(format!(
                "redis-server on port {} did not answer: {e}; log:\n{log}",
                self.port
            )));
        }
        Ok(())
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Kills the server with `SIGKILL` and waits until it is gone. Its port
    /// and directory are kept for [`restart`](RedisServer::restart).
    pub fn kill(&mut self) {
        self.stop();
    }

    /// Starts the server again on the same port, with an empty dataset (and
    /// an empty script cache), in the environment it was started with.
    pub fn restart(&mut self) -> io::Result<()> {
        self.stop();
        self.launch(Cleanup::OnDrop)
    }

    /// Whether the server was started and not killed since.
    fn is_running(&self) -> bool {
        self.watchdog.is_some()
    }

    fn stop(&mut self) {
        if let Some((mut child, stdin)) = self.watchdog.take() {
            drop(stdin);
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[derive(Clone, Copy)]
enum Cleanup {
    /// The test drops the server; the watchdog keeps the directory for restarts.
    OnDrop,
    /// The server lives until the process ends; the watchdog removes everything.
    AtExit,
}

/// How long a restarted cluster node may take to rejoin its cluster (and,
/// as a replica, to sync with its primary) before
/// [`RedisCluster::restart_node`] gives up.
const REJOIN_GUARD: Duration = Duration::from_secs(30);

/// How often the cluster waits ask the nodes again: each round opens a
/// connection to every running node.
const CLUSTER_POLL: Duration = Duration::from_millis(100);

/// A Redis Cluster built by the harness: primaries, and optionally
/// replicas of each.
///
/// A cluster from [`start_kept`](RedisCluster::start_kept) survives the
/// faults a test injects: [`kill_node`](RedisCluster::kill_node),
/// [`wait_for_promotion`](RedisCluster::wait_for_promotion) of a replica,
/// [`restart_node`](RedisCluster::restart_node) back into the cluster.
///
/// ```text
/// kill_node(primary)            the primary is gone; its replicas were noted
/// ~2 s (cluster-node-timeout)   the other nodes mark it failed
/// ~0.5-1.5 s                    a replica wins the election: role:master
/// wait_for_promotion -> port    every running node says cluster_state:ok
/// restart_node(primary)         it rejoins from nodes.conf, empty, and
///                               follows the replica that took its slots
/// ```
pub struct RedisCluster {
    /// Every node, in the order it was started: `redis-cli --cluster
    /// create` made the first ones the primaries.
    nodes: Vec<RedisServer>,
    /// The nodes' directories (with their `nodes.conf`) for a cluster whose
    /// nodes survive a kill, empty otherwise. Declared after `nodes` so the
    /// servers are stopped before their directories go.
    kept: Vec<KeptDir>,
    /// The replicas each primary killed by [`kill_node`](Self::kill_node)
    /// had just before: the nodes that may be promoted in its place.
    replicas_at_kill: HashMap<u16, Vec<u16>>,
}

/// What a restarted node should become, as the other nodes see it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Rejoin {
    /// It still owns its slots: it comes back as their primary.
    Primary,
    /// It was a replica, or a primary whose slots a replica took over: it
    /// comes back as a replica.
    Replica,
    /// No other node answered: only `cluster_state:ok` is waited for.
    Unknown,
}

impl RedisCluster {
    /// Starts `primaries` cluster-enabled servers and joins them into one
    /// cluster covering all 16384 slots.
    pub fn start(primaries: usize) -> io::Result<RedisCluster> {
        Self::start_with_replicas(primaries, 0)
    }

    /// As [`start`](RedisCluster::start), with `replicas` replicas of each
    /// primary, and waits until every replica has synced.
    ///
    /// A node killed in such a cluster loses its directory, and with it its
    /// `nodes.conf` (its identity in the cluster): started again it would
    /// be a stranger. [`start_kept`](RedisCluster::start_kept) makes a
    /// cluster whose nodes can come back.
    pub fn start_with_replicas(primaries: usize, replicas: usize) -> io::Result<RedisCluster> {
        Self::create(primaries, replicas, &[], Cleanup::AtExit)
    }

    /// As [`start_with_replicas`](RedisCluster::start_with_replicas), with
    /// node directories that survive [`kill_node`](RedisCluster::kill_node),
    /// so [`restart_node`](RedisCluster::restart_node) brings a node back as
    /// the same member of the same cluster. The directories are removed when
    /// the cluster is dropped, or when the test process ends however it
    /// ends.
    pub fn start_kept(primaries: usize, replicas: usize) -> io::Result<RedisCluster> {
        Self::start_kept_with_env(primaries, replicas, &[])
    }

    /// As [`start_kept`](RedisCluster::start_kept), with `env` added to
    /// every node's environment, at its start and every
    /// [`restart_node`](RedisCluster::restart_node): a
    /// [`ServerClock`](crate::server_clock::ServerClock)'s, say, which then
    /// moves the clocks of all the nodes together.
    pub fn start_kept_with_env(
        primaries: usize,
        replicas: usize,
        env: &[(String, String)],
    ) -> io::Result<RedisCluster> {
        Self::create(primaries, replicas, env, Cleanup::OnDrop)
    }

    fn create(
        primaries: usize,
        replicas: usize,
        env: &[(String, String)],
        cleanup: Cleanup,
    ) -> io::Result<RedisCluster> {
        let total = primaries * (1 + replicas);
        let mut nodes = Vec::with_capacity(total);
        let mut kept = Vec::new();
        for _ in 0..total {
            let extra = vec![
                "--cluster-enabled".to_owned(),
                "yes".to_owned(),
                "--cluster-config-file".to_owned(),
                "nodes.conf".to_owned(),
                "--cluster-node-timeout".to_owned(),
                "2000".to_owned(),
            ];
            let node = RedisServer::start_fresh(extra, env, cleanup)?;
            if let Cleanup::OnDrop = cleanup {
                kept.push(KeptDir::new(node.dir.clone())?);
            }
            nodes.push(node);
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        // redis-cli makes the first `primaries` addresses the primaries.
        let output = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| io::Error::new(e.kind(), format!("running redis-cli: {e}")))?;
        if !output.status.success() {
            return Err(io::Error::other(format!(
                "redis-cli --cluster create failed: {}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        for node in &nodes {
            wait_until(START_GUARD, || cluster_ok(node.port))?;
        }
        for node in &nodes[primaries..] {
            wait_until(START_GUARD, || {
                let info = command(node.port, &["INFO", "replication"])?;
                if info.contains("master_link_status:up") {
                    Ok(())
                } else {
                    Err(io::Error::other(format!(
                        "replica {} not synced",
                        node.port
                    )))
                }
            })?;
        }
        Ok(RedisCluster {
            nodes,
            kept,
            replicas_at_kill: HashMap::new(),
        })
    }

    /// The ports of the running nodes that report `role:master` (`INFO
    /// replication`), in the order the nodes were started. After a failover
    /// that is the promoted replica, not the killed primary. A killed
    /// primary that was restarted counts while it says it is one: briefly,
    /// until it learns that its slots moved on
    /// ([`restart_node`](RedisCluster::restart_node) waits for that).
    ///
    /// Fails, naming the node, if a running node does not answer (a paused
    /// one, say): a list without it could be missing a primary.
    pub fn primary_ports(&self) -> io::Result<Vec<u16>> {
        let mut primaries = Vec::new();
        for node in self.nodes.iter().filter(|node| node.is_running()) {
            if role(node.port)? == "master" {
                primaries.push(node.port);
            }
        }
        Ok(primaries)
    }

    /// The ports of the replicas of the primary on `port`, as it reports
    /// them (`INFO replication`: the replicas connected to it now).
    pub fn replica_ports(&self, port: u16) -> io::Result<Vec<u16>> {
        let info = command(port, &["INFO", "replication"])
            .map_err(|e| io::Error::other(format!("asking node {port} for its replicas: {e}")))?;
        Ok(info
            .lines()
            .filter(|line| line.starts_with("slave"))
            .filter_map(|line| line.split(",port=").nth(1)?.split(',').next()?.parse().ok())
            .collect())
    }

    /// The process ids of the replicas of the primary on `port`, as it
    /// reports them (`INFO replication`).
    pub fn replica_pids(&self, port: u16) -> io::Result<Vec<u32>> {
        let ports = self.replica_ports(port)?;
        Ok(self
            .nodes
            .iter()
            .filter(|node| ports.contains(&node.port))
            .map(RedisServer::pid)
            .collect())
    }

    /// The nodes' URLs, in the order they were started (the first primaries
    /// first), killed nodes included.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Kills the node on `port` with `SIGKILL` and waits until it is gone.
    /// If it was a primary, the replicas connected to it are noted first,
    /// for [`wait_for_promotion`](RedisCluster::wait_for_promotion). Killing
    /// a node that is down does nothing.
    pub fn kill_node(&mut self, port: u16) -> io::Result<()> {
        let index = self.index_of(port)?;
        if !self.nodes[index].is_running() {
            return Ok(());
        }
        // Once it is dead nothing says which nodes replicated it: the
        // promoted replica's own line no longer names a primary.
        match role(port) {
            Ok(role) if role == "master" => {
                let replicas = self.replica_ports(port).unwrap_or_default();
                self.replicas_at_kill.insert(port, replicas);
            }
            _ => {
                self.replicas_at_kill.remove(&port);
            }
        }
        self.nodes[index].kill();
        Ok(())
    }

    /// Starts the node on `port` again (killing it first if it runs) on the
    /// same port and directory, for a cluster from
    /// [`start_kept`](RedisCluster::start_kept). It rejoins as the same
    /// member, from its `nodes.conf`, with an empty dataset (the nodes keep
    /// no data on disk).
    ///
    /// Waits (up to 30 s) until it says `cluster_state:ok` and has taken the
    /// role the other nodes give it: a primary whose slots a replica took
    /// over comes back as a replica of that new primary, and a replica
    /// comes back as a replica; either must report `role:slave` and
    /// `master_link_status:up` (synced). Restart a killed primary after
    /// [`wait_for_promotion`](RedisCluster::wait_for_promotion) returned:
    /// restarted while its replica's election is still running, it is
    /// expected back as the primary, and may be demoted just after this
    /// returns.
    pub fn restart_node(&mut self, port: u16) -> io::Result<()> {
        let index = self.index_of(port)?;
        if self.kept.is_empty() {
            return Err(io::Error::other(format!(
                "node {port} cannot rejoin: its directory, with its nodes.conf, went with \
                 the kill; start the cluster with RedisCluster::start_kept"
            )));
        }
        self.nodes[index].kill();
        let expected = self.expected_rejoin(port);
        self.nodes[index]
            .restart()
            .map_err(|e| io::Error::other(format!("restarting cluster node {port}: {e}")))?;
        wait_every(REJOIN_GUARD, CLUSTER_POLL, || {
            cluster_ok(port)?;
            if expected == Rejoin::Unknown {
                return Ok(());
            }
            let info = command(port, &["INFO", "replication"])?;
            let role = info_field(&info, "role").unwrap_or("(none)");
            let link = info_field(&info, "master_link_status");
            match (expected, role, link) {
                (Rejoin::Primary, "master", _) | (Rejoin::Replica, "slave", Some("up")) => Ok(()),
                _ => Err(io::Error::other(format!(
                    "expected back as {expected:?}, it reports role:{role}, \
                     master_link_status:{}",
                    link.unwrap_or("(none)")
                ))),
            }
        })
        .map_err(|e| {
            io::Error::other(format!(
                "node {port} did not rejoin the cluster within {REJOIN_GUARD:?}: {e}"
            ))
        })
    }

    /// After the primary on `old_primary_port` was killed, waits (up to
    /// `guard`) until one of its former replicas reports `role:master`
    /// (`INFO replication`) and every running node reports
    /// `cluster_state:ok`, and returns the port of that new primary.
    ///
    /// Its former replicas are those [`kill_node`](RedisCluster::kill_node)
    /// noted; for a primary killed some other way, those the running nodes
    /// still list as its replicas (`CLUSTER NODES`), which only holds before
    /// the promotion.
    pub fn wait_for_promotion(&self, old_primary_port: u16, guard: Duration) -> io::Result<u16> {
        self.index_of(old_primary_port)?;
        let candidates = match self.replicas_at_kill.get(&old_primary_port) {
            Some(replicas) if !replicas.is_empty() => replicas.clone(),
            _ => self.replicas_seen_by_peers(old_primary_port)?,
        };
        if candidates.is_empty() {
            return Err(io::Error::other(format!(
                "the primary on port {old_primary_port} has no replicas this cluster knows \
                 of, so none can take over: start the cluster with replicas, and kill the \
                 primary with kill_node while they are attached"
            )));
        }
        let mut promoted = None;
        wait_every(guard, CLUSTER_POLL, || {
            let new = candidates
                .iter()
                .copied()
                .filter(|port| self.is_running(*port))
                .find(|port| role(*port).is_ok_and(|role| role == "master"))
                .ok_or_else(|| {
                    io::Error::other(format!(
                        "none of its former replicas {candidates:?} reports role:master"
                    ))
                })?;
            for node in self.nodes.iter().filter(|node| node.is_running()) {
                cluster_ok(node.port)?;
            }
            promoted = Some(new);
            Ok(())
        })
        .map_err(|e| {
            io::Error::other(format!(
                "no replica took over from the primary on port {old_primary_port} within \
                 {guard:?}: {e}"
            ))
        })?;
        promoted.ok_or_else(|| io::Error::other("the promotion wait ended without a primary"))
    }

    fn index_of(&self, port: u16) -> io::Result<usize> {
        self.nodes
            .iter()
            .position(|node| node.port == port)
            .ok_or_else(|| {
                io::Error::other(format!(
                    "no node of this cluster listens on port {port} (its nodes: {:?})",
                    self.nodes.iter().map(RedisServer::port).collect::<Vec<_>>()
                ))
            })
    }

    fn is_running(&self, port: u16) -> bool {
        self.nodes
            .iter()
            .any(|node| node.port == port && node.is_running())
    }

    /// The first answer, from a running node other than `port`, to "what is
    /// the node on `port`?".
    fn peer_view(&self, port: u16) -> Option<(NodeView, Vec<NodeView>)> {
        self.nodes
            .iter()
            .filter(|node| node.port != port && node.is_running())
            .find_map(|peer| {
                let view = cluster_nodes(peer.port).ok()?;
                let line = view.iter().find(|line| line.port == port)?.clone();
                Some((line, view))
            })
    }

    fn expected_rejoin(&self, port: u16) -> Rejoin {
        match self.peer_view(port) {
            Some((line, _)) if line.flags.iter().any(|flag| flag == "slave") => Rejoin::Replica,
            // A primary that lost all its slots to a replica's promotion
            // follows that replica when it comes back.
            Some((line, _)) if !line.owns_slots => Rejoin::Replica,
            Some(_) => Rejoin::Primary,
            None => Rejoin::Unknown,
        }
    }

    fn replicas_seen_by_peers(&self, port: u16) -> io::Result<Vec<u16>> {
        let (line, view) = self.peer_view(port).ok_or_else(|| {
            io::Error::other(format!(
                "no running node of this cluster answered CLUSTER NODES about port {port}"
            ))
        })?;
        Ok(view
            .iter()
            .filter(|other| other.master.as_deref() == Some(line.id.as_str()))
            .map(|other| other.port)
            .collect())
    }
}

/// One line of `CLUSTER NODES`: a node as the node asked sees it.
#[derive(Clone, Debug)]
struct NodeView {
    id: String,
    port: u16,
    /// `myself`, `master`, `slave`, `fail?`, `fail`...
    flags: Vec<String>,
    /// The id of the primary it replicates, for a replica.
    master: Option<String>,
    /// Whether any slot (or slot range) is listed for it.
    owns_slots: bool,
}

/// The nodes of the cluster as the node on `port` sees them.
fn cluster_nodes(port: u16) -> io::Result<Vec<NodeView>> {
    let reply = command(port, &["CLUSTER", "NODES"])
        .map_err(|e| io::Error::other(format!("CLUSTER NODES on node {port}: {e}")))?;
    reply
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // `<id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent>
            // <pong-recv> <config-epoch> <link-state> <slot>...`
            let port = fields
                .get(1)
                .and_then(|address| address.split('@').next()?.rsplit(':').next()?.parse().ok());
            match (fields.first(), port, fields.get(2), fields.get(3)) {
                (Some(id), Some(port), Some(flags), Some(master)) => Ok(NodeView {
                    id: (*id).to_owned(),
                    port,
                    flags: flags.split(',').map(str::to_owned).collect(),
                    master: (*master != "-").then(|| (*master).to_owned()),
                    owns_slots: fields.len() > 8,
                }),
                _ => Err(io::Error::other(format!(
                    "CLUSTER NODES on node {port:?}: cannot read the line {line:?}"
                ))),
            }
        })
        .collect()
}

/// `Ok` when the node on `port` says `cluster_state:ok` (`CLUSTER INFO`).
fn cluster_ok(port: u16) -> io::Result<()> {
    let info = command(port, &["CLUSTER", "INFO"])
        .map_err(|e| io::Error::other(format!("CLUSTER INFO on node {port}: {e}")))?;
    match info_field(&info, "cluster_state") {
        Some("ok") => Ok(()),
        state => Err(io::Error::other(format!(
            "node {port} reports cluster_state:{}",
            state.unwrap_or("(none)")
        ))),
    }
}

/// The `role` the node on `port` reports (`INFO replication`): `master` or
/// `slave`.
fn role(port: u16) -> io::Result<String> {
    let info = command(port, &["INFO", "replication"])
        .map_err(|e| io::Error::other(format!("INFO replication on node {port}: {e}")))?;
    info_field(&info, "role")
        .map(str::to_owned)
        .ok_or_else(|| io::Error::other(format!("node {port} reports no role: {info:?}")))
}

/// The value of `field` in an `INFO` or `CLUSTER INFO` reply (lines of
/// `field:value`).
fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

/// Runs one command on 127.0.0.1:`port` over a plain connection (no
/// cluster redirection) and returns the reply as text.
pub fn command(port: u16, args: &[&str]) -> io::Result<String> {
    let client =
        redis::Client::open(format!("redis://127.0.0.1:{port}")).map_err(io::Error::other)?;
    let mut connection = client
        .get_connection_with_timeout(Duration::from_secs(2))
        .map_err(io::Error::other)?;
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    let value: redis::Value = cmd.query(&mut connection).map_err(io::Error::other)?;
    Ok(match value {
        redis::Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        redis::Value::VerbatimString { text, .. } => text,
        redis::Value::SimpleString(text) => text,
        redis::Value::Int(n) => n.to_string(),
        other => format!("{other:?}"),
    })
}

fn ping(port: u16) -> io::Result<()> {
    let reply = match command(port, &["PING"]) {
        // A server started with `--requirepass` answers, just not to us.
        Err(e) if e.to_string().contains("NOAUTH") => return Ok(()),
        reply => reply?,
    };
    if reply == "PONG" {
        Ok(())
    } else {
        Err(io::Error::other(format!("PING answered {reply:?}")))
    }
}

fn wait_until(guard: Duration, check: impl FnMut() -> io::Result<()>) -> io::Result<()> {
    wait_every(guard, Duration::from_millis(20), check)
}

/// Runs `check` every `interval` until it passes, or returns its last error
/// once `guard` has passed.
fn wait_every(
    guard: Duration,
    interval: Duration,
    mut check: impl FnMut() -> io::Result<()>,
) -> io::Result<()> {
    let deadline = Instant::now() + guard;
    loop {
        match check() {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(interval),
        }
    }
}

/// A port that is free now, and whose cluster bus port (+10000) is free too.
pub fn free_port() -> io::Result<u16> {
    for _ in 0..100 {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return Ok(port);
        }
    }
    Err(io::Error::other("no free port pair found"))
}

fn temp_dir(port: u16) -> io::Result<PathBuf> {
    let unique: u64 = rand::random();
    let dir = std::env::temp_dir().join(format!(
        "lock-tests-redis-{}-{port}-{unique:016x}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Writes `line` and flushes: child processes use it to talk to the parent.
pub fn say(line: &str) {
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
