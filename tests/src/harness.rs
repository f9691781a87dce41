//! Real Redis servers for the tests: found, or started on free ports.
//!
//! - [`redis_url`] / [`cluster_urls`]: a server (cluster) shared by every test
//!   of one test binary. `REDIS_URL` (`REDIS_CLUSTER_URLS`, comma-separated)
//!   points at an existing one; otherwise one is started with `redis-server`
//!   from `PATH`, in a temporary directory, on free ports.
//! - [`RedisServer::start`]: a server of the test's own, for tests that kill
//!   and restart it.
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

use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use lock_core::{LockManager, RedisStore};

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
        if !redis_server_installed() {
            return unavailable(
                "a test that needs a Redis server of its own",
                "redis-server is not on PATH (REDIS_URL alone is not enough for it)",
            );
        }
        let extra = args.iter().map(|a| (*a).to_owned()).collect();
        Some(
            Self::start_fresh(extra, Cleanup::OnDrop)
                .unwrap_or_else(|e| panic!("starting redis-server: {e}")),
        )
    }

    fn start_shared() -> io::Result<RedisServer> {
        Self::start_fresh(Vec::new(), Cleanup::AtExit)
    }

    /// Starts on a fresh port, retrying with another port if one was taken
    /// between choosing and binding it.
    fn start_fresh(extra: Vec<String>, cleanup: Cleanup) -> io::Result<RedisServer> {
        let mut last = io::Error::other("no attempt made");
        for _ in 0..5 {
            let port = free_port()?;
            let dir = temp_dir(port)?;
            let mut server = RedisServer {
                port,
                dir,
                extra: extra.clone(),
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
    /// an empty script cache).
    pub fn restart(&mut self) -> io::Result<()> {
        self.stop();
        self.launch(Cleanup::OnDrop)
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

/// A Redis Cluster built by the harness: primaries, and optionally
/// replicas of each.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// How many of `nodes`, from the first, are primaries.
    primaries: usize,
}

impl RedisCluster {
    /// Starts `primaries` cluster-enabled servers and joins them into one
    /// cluster covering all 16384 slots.
    pub fn start(primaries: usize) -> io::Result<RedisCluster> {
        Self::start_with_replicas(primaries, 0)
    }

    /// As [`start`](RedisCluster::start), with `replicas` replicas of each
    /// primary, and waits until every replica has synced.
    pub fn start_with_replicas(primaries: usize, replicas: usize) -> io::Result<RedisCluster> {
        let total = primaries * (1 + replicas);
        let mut nodes = Vec::with_capacity(total);
        for _ in 0..total {
            let extra = vec![
                "--cluster-enabled".to_owned(),
                "yes".to_owned(),
                "--cluster-config-file".to_owned(),
                "nodes.conf".to_owned(),
                "--cluster-node-timeout".to_owned(),
                "2000".to_owned(),
            ];
            nodes.push(RedisServer::start_fresh(extra, Cleanup::AtExit)?);
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
            .output()?;
        if !output.status.success() {
            return Err(io::Error::other(format!(
                "redis-cli --cluster create failed: {}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        for node in &nodes {
            wait_until(START_GUARD, || {
                let info = command(node.port, &["CLUSTER", "INFO"])?;
                if info.contains("cluster_state:ok") {
                    Ok(())
                } else {
                    Err(io::Error::other(format!("node {} not ready", node.port)))
                }
            })?;
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
        Ok(RedisCluster { nodes, primaries })
    }

    /// The primaries' ports.
    pub fn primary_ports(&self) -> Vec<u16> {
        self.nodes[..self.primaries]
            .iter()
            .map(RedisServer::port)
            .collect()
    }

    /// The process ids of the replicas of the primary on `port`, as it
    /// reports them (`INFO replication`).
    pub fn replica_pids(&self, port: u16) -> io::Result<Vec<u32>> {
        let info = command(port, &["INFO", "replication"])?;
        let ports: Vec<u16> = info
            .lines()
            .filter(|line| line.starts_with("slave"))
            .filter_map(|line| line.split(",port=").nth(1)?.split(',').next()?.parse().ok())
            .collect();
        Ok(self
            .nodes
            .iter()
            .filter(|node| ports.contains(&node.port))
            .map(RedisServer::pid)
            .collect())
    }

    /// The nodes' URLs (the primaries first).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
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

fn wait_until(guard: Duration, mut check: impl FnMut() -> io::Result<()>) -> io::Result<()> {
    let deadline = Instant::now() + guard;
    loop {
        match check() {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
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
