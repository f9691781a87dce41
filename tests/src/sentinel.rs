//! Redis with a replica and Sentinel, for the failover tests.
//!
//! [`Sentinels::start`] starts, on free ports, one primary, one replica of
//! it and three sentinels watching them (quorum 2, a primary called down
//! after [`DOWN_AFTER`]), and waits until the sentinels agree on the
//! primary, know the replica and know each other. A test then plays the
//! failure it is about:
//!
//! ```text
//! kill_primary()         SIGKILL: the primary's unreplicated writes die with it
//! wait_for_failover(p)   the sentinels promote the replica; its port
//! bring_back(p)          the killed node returns, as a replica of the new primary
//! stop_replica()         the replica is killed; the primary keeps serving
//! pause_replica()        SIGSTOP: the replica falls behind until resume(pid)
//! start_replica()        it returns, as a replica again
//! ```
//!
//! so rounds of failovers can repeat on the same group, the two data nodes
//! trading roles each time.
//!
//! Every process runs under the watchdog of [`crate::server`]: killed on
//! drop, and killed with its directory removed when the test process ends,
//! however it ends. Each sentinel writes its own config file (Sentinel
//! rewrites it as it learns) in its own directory.
//!
//! [`sentinel_url`] is one group shared by every test of a test binary, for
//! the contract suite; tests that kill nodes start a group of their own.

use std::io;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use lock_core::{LockManager, RedisConfig, RedisStore};
use redis::FromRedisValue;

use crate::harness::{announce, redis_server_installed, unavailable};
use crate::server::{Server, signal};

/// How long the sentinels wait for a silent primary before calling it down
/// (`down-after-milliseconds`): short, so a failover takes seconds, and
/// more than twice Sentinel's one-second reconnect throttle. A sentinel
/// whose first connection to a freshly promoted primary fails retries only
/// a second later; with 500 ms or 1 s here, that alone made one failover
/// in a few dozen call the new primary down and promote the empty node
/// just brought back.
pub const DOWN_AFTER: Duration = Duration::from_millis(2500);

/// Sentinel's `failover-timeout`: also how soon a failed election is
/// tried again (twice this).
const FAILOVER_TIMEOUT: Duration = Duration::from_millis(2000);

/// How long starting the group, or settling it after a change, may take.
const SETTLE_GUARD: Duration = Duration::from_secs(30);

/// How long one query of the harness's own may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// Writes the sentinel's config (`$1`) into its directory (`$2`), then
/// becomes the sentinel, so the watchdog's pid is the sentinel's.
const SENTINEL_LAUNCH: &str =
    r#"printf '%s\n' "$1" > "$2/sentinel.conf" && exec redis-server "$2/sentinel.conf" --sentinel"#;

/// Passwords for a group: none by default.
#[derive(Clone, Debug, Default)]
pub struct Passwords {
    /// `requirepass` (and `masterauth`) of the primary and replica.
    pub data: Option<String>,
    /// `requirepass` of the sentinels.
    pub sentinels: Option<String>,
}

/// One primary, one replica and three sentinels. See the [module
/// docs](self).
pub struct Sentinels {
    service: String,
    passwords: Passwords,
    /// Added to the data nodes' environment (not the sentinels') at every
    /// start, [`bring_back`](Sentinels::bring_back) included.
    data_env: Vec<(String, String)>,
    /// The two data nodes; which one is the primary changes with each
    /// failover.
    nodes: Vec<DataNode>,
    sentinels: Vec<Server>,
}

/// A primary or replica: its port outlives its process, so that it can be
/// brought back where the sentinels expect it.
struct DataNode {
    port: u16,
    /// `None` while killed.
    server: Option<Server>,
}

impl Sentinels {
    /// A group of the caller's own, or `None` (after the loud notice, or a
    /// failure under `CI=true`) when `redis-server` is not installed.
    pub fn start() -> Option<Sentinels> {
        Self::start_with(Passwords::default())
    }

    /// As [`start`](Sentinels::start), with passwords on the data nodes,
    /// the sentinels, or both.
    pub fn start_with(passwords: Passwords) -> Option<Sentinels> {
        Self::start_with_env(passwords, &[])
    }

    /// As [`start_with`](Sentinels::start_with), with `data_env` added to
    /// the environment of the two data nodes, at their start and whenever
    /// they come back ([`bring_back`](Sentinels::bring_back),
    /// [`start_replica`](Sentinels::start_replica)); the sentinels run
    /// without it. A
    /// [`ServerClock`](crate::server_clock::ServerClock)'s environment, say,
    /// moves the data nodes' clocks and leaves the sentinels' alone.
    pub fn start_with_env(
        passwords: Passwords,
        data_env: &[(String, String)],
    ) -> Option<Sentinels> {
        if !redis_server_installed() {
            return unavailable(
                "a Redis Sentinel test",
                "redis-server is not on PATH (it runs the data nodes and the sentinels)",
            );
        }
        Some(
            Self::launch(passwords, data_env.to_vec())
                .unwrap_or_else(|e| panic!("starting a primary, a replica and sentinels: {e}")),
        )
    }

    fn launch(passwords: Passwords, data_env: Vec<(String, String)>) -> io::Result<Sentinels> {
        let service = format!("locks-{:08x}", rand::random::<u32>());
        let primary = start_node(None, &passwords, None, &data_env)?;
        let replica = start_node(None, &passwords, Some(primary.port), &data_env)?;
        let mut group = Sentinels {
            service,
            passwords,
            data_env,
            nodes: vec![
                DataNode {
                    port: primary.port,
                    server: Some(primary),
                },
                DataNode {
                    port: replica.port,
                    server: Some(replica),
                },
            ],
            sentinels: Vec::new(),
        };
        let (primary, replica) = (group.nodes[0].port, group.nodes[1].port);
        // Synced before the sentinels look: they find replicas in the
        // primary's INFO, which they read again only every 10 s.
        group.wait(SETTLE_GUARD, || group.replicating(primary, replica))?;
        for _ in 0..3 {
            let sentinel = group.start_sentinel(primary)?;
            group.sentinels.push(sentinel);
        }
        group.settle(primary, Some(replica), SETTLE_GUARD)?;
        Ok(group)
    }

    fn start_sentinel(&self, primary: u16) -> io::Result<Server> {
        let service = &self.service;
        let mut config = vec![
            "port {port}".to_owned(),
            "bind 127.0.0.1".to_owned(),
            "dir {dir}".to_owned(),
            "sentinel resolve-hostnames no".to_owned(),
            "sentinel announce-hostnames no".to_owned(),
            format!("sentinel monitor {service} 127.0.0.1 {primary} 2"),
            format!(
                "sentinel down-after-milliseconds {service} {}",
                DOWN_AFTER.as_millis()
            ),
            format!(
                "sentinel failover-timeout {service} {}",
                FAILOVER_TIMEOUT.as_millis()
            ),
            format!("sentinel parallel-syncs {service} 1"),
        ];
        if let Some(password) = &self.passwords.data {
            config.push(format!("sentinel auth-pass {service} {password}"));
        }
        if let Some(password) = &self.passwords.sentinels {
            config.push(format!("requirepass {password}"));
            config.push(format!("sentinel sentinel-pass {password}"));
        }
        let config = config.join("\n");
        let password = self.passwords.sentinels.clone();
        Server::start(
            "sh",
            &["-c", SENTINEL_LAUNCH, "sentinel", &config, "{dir}"],
            move |port| ping(port, password.as_deref()),
        )
    }

    /// The `redis+sentinel://` URL of the group, with the passwords in it.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        let auth = self
            .passwords
            .data
            .as_ref()
            .map(|password| format!(":{password}@"))
            .unwrap_or_default();
        let query = self
            .passwords
            .sentinels
            .as_ref()
            .map(|password| format!("?sentinel_password={password}"))
            .unwrap_or_default();
        format!(
            "redis+sentinel://{auth}{}/{}{query}",
            hosts.join(","),
            self.service
        )
    }

    /// The name the sentinels monitor the primary under.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// The sentinels' ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    /// The primary's port, as most sentinels report it (`SENTINEL
    /// get-master-addr-by-name`). Right after a failover, before word of it
    /// has reached the others, that may still be the old one: see
    /// [`wait_for_failover`](Sentinels::wait_for_failover).
    pub fn primary_port(&self) -> io::Result<u16> {
        let mut reports: Vec<u16> = Vec::new();
        let mut last = io::Error::other("no sentinel");
        for sentinel in &self.sentinels {
            match self.reported_primary(sentinel.port) {
                Ok(port) => reports.push(port),
                Err(e) => last = e,
            }
        }
        let majority = self.sentinels.len() / 2 + 1;
        reports
            .iter()
            .copied()
            .find(|port| reports.iter().filter(|other| *other == port).count() >= majority)
            .ok_or_else(|| {
                io::Error::other(format!(
                    "no primary reported by {majority} sentinels: {reports:?} (last error: {last})"
                ))
            })
    }

    /// The port of the data node that is not the primary, whether it runs
    /// or not.
    pub fn replica_port(&self) -> io::Result<u16> {
        let primary = self.primary_port()?;
        self.nodes
            .iter()
            .map(|node| node.port)
            .find(|&port| port != primary)
            .ok_or_else(|| io::Error::other("no data node other than the primary"))
    }

    /// Kills the primary with `SIGKILL` (its unreplicated writes die with
    /// it) and returns its port, for [`wait_for_failover`] and
    /// [`bring_back`].
    ///
    /// [`wait_for_failover`]: Sentinels::wait_for_failover
    /// [`bring_back`]: Sentinels::bring_back
    pub fn kill_primary(&mut self) -> io::Result<u16> {
        let primary = self.primary_port()?;
        self.kill(primary)?;
        Ok(primary)
    }

    /// Kills the replica with `SIGKILL` and returns its port; the primary
    /// goes on serving without it.
    pub fn stop_replica(&mut self) -> io::Result<u16> {
        let replica = self.replica_port()?;
        self.kill(replica)?;
        Ok(replica)
    }

    /// Pauses the replica with `SIGSTOP`: it reads nothing from its link
    /// and answers nobody until [`resume`](Sentinels::resume) (the
    /// sentinels call it down only after [`DOWN_AFTER`]). Returns its pid.
    pub fn pause_replica(&self) -> io::Result<u32> {
        let replica = self.replica_port()?;
        let info = self.data_command(replica, &["INFO", "server"])?;
        let pid = info
            .lines()
            .find_map(|line| line.strip_prefix("process_id:"))
            .and_then(|pid| pid.trim().parse().ok())
            .ok_or_else(|| io::Error::other(format!("no process_id in INFO: {info}")))?;
        signal(pid, "-STOP")?;
        Ok(pid)
    }

    /// Resumes a node paused by [`pause_replica`](Sentinels::pause_replica).
    pub fn resume(&self, pid: u32) -> io::Result<()> {
        signal(pid, "-CONT")
    }

    /// Brings back the stopped replica (as [`bring_back`] does).
    ///
    /// [`bring_back`]: Sentinels::bring_back
    pub fn start_replica(&mut self, guard: Duration) -> io::Result<()> {
        let replica = self.replica_port()?;
        self.bring_back(replica, guard)
    }

    fn kill(&mut self, port: u16) -> io::Result<()> {
        let node = self
            .nodes
            .iter_mut()
            .find(|node| node.port == port)
            .ok_or_else(|| io::Error::other(format!("no data node on port {port}")))?;
        let mut server = node
            .server
            .take()
            .ok_or_else(|| io::Error::other(format!("the node on port {port} is not running")))?;
        // SIGKILL, and wait until it is gone.
        server.kill();
        Ok(())
    }

    /// Waits until a sentinel reports a primary other than `old` and that
    /// node answers `ROLE` as a master: the failover happened. Returns the
    /// new primary's port. Fails after `guard`.
    pub fn wait_for_failover(&self, old: u16, guard: Duration) -> io::Result<u16> {
        let mut found = 0;
        self.wait(guard, || {
            for sentinel in &self.sentinels {
                let Ok(port) = self.reported_primary(sentinel.port) else {
                    continue;
                };
                if port != old && self.role(port).is_ok_and(|role| role == "master") {
                    found = port;
                    return Ok(());
                }
            }
            Err(io::Error::other(format!(
                "no sentinel reports a primary other than {old} that answers as a master"
            )))
        })?;
        Ok(found)
    }

    /// Starts the killed node on `port` again, empty, as a replica of the
    /// current primary (as the sentinels would make it, only sooner), and
    /// waits until it has synced and every sentinel agrees on the primary
    /// and sees the node as its healthy replica: the group can fail over
    /// again.
    pub fn bring_back(&mut self, port: u16, guard: Duration) -> io::Result<()> {
        // Two nodes: the primary is the other one, once it has been
        // promoted (the sentinels may not all say so yet).
        let primary = self
            .nodes
            .iter()
            .map(|node| node.port)
            .find(|&other| other != port)
            .ok_or_else(|| io::Error::other("no other data node"))?;
        if self.role(primary)? != "master" {
            return Err(io::Error::other(format!(
                "{primary} is not a master yet: wait for the failover first"
            )));
        }
        let index = self
            .nodes
            .iter()
            .position(|node| node.port == port)
            .ok_or_else(|| io::Error::other(format!("no data node on port {port}")))?;
        if self.nodes[index].server.is_some() {
            return Err(io::Error::other(format!("the node on port {port} runs")));
        }
        let server = start_node(Some(port), &self.passwords, Some(primary), &self.data_env)?;
        self.nodes[index].server = Some(server);
        self.settle(primary, Some(port), guard)
    }

    /// Waits until every sentinel reports `primary`, knows the two other
    /// sentinels and, when `replica` is given, sees it as a healthy replica
    /// of `primary` that has synced.
    pub fn settle(&self, primary: u16, replica: Option<u16>, guard: Duration) -> io::Result<()> {
        self.wait(guard, || {
            if self.role(primary)? != "master" {
                return Err(io::Error::other(format!("{primary} is not a master")));
            }
            if let Some(replica) = replica {
                self.replicating(primary, replica)?;
            }
            for sentinel in &self.sentinels {
                self.sentinel_settled(sentinel.port, primary, replica)?;
            }
            Ok(())
        })
    }

    fn sentinel_settled(
        &self,
        sentinel: u16,
        primary: u16,
        replica: Option<u16>,
    ) -> io::Result<()> {
        let reported = self.reported_primary(sentinel)?;
        if reported != primary {
            return Err(io::Error::other(format!(
                "sentinel {sentinel} reports {reported}, not {primary}"
            )));
        }
        let peers: Vec<std::collections::HashMap<String, String>> = self.sentinel_query(
            sentinel,
            redis::cmd("SENTINEL").arg("sentinels").arg(&self.service),
        )?;
        if peers.len() != self.sentinels.len() - 1 {
            return Err(io::Error::other(format!(
                "sentinel {sentinel} knows {} other sentinels",
                peers.len()
            )));
        }
        if let Some(replica) = replica {
            let replicas: Vec<std::collections::HashMap<String, String>> = self.sentinel_query(
                sentinel,
                redis::cmd("SENTINEL").arg("replicas").arg(&self.service),
            )?;
            let port = replica.to_string();
            let healthy = replicas.iter().any(|entry| {
                let field = |name: &str| entry.get(name).map(String::as_str);
                field("port") == Some(port.as_str())
                    && field("flags") == Some("slave")
                    && field("master-link-status") == Some("ok")
                    && field("master-port") == Some(primary.to_string().as_str())
            });
            if !healthy {
                return Err(io::Error::other(format!(
                    "sentinel {sentinel} does not yet see {replica} as a healthy replica: \
                     {replicas:?}"
                )));
            }
        }
        Ok(())
    }

    /// `Ok` once `replica` has synced with `primary` and the primary counts
    /// it as online (so `WAIT` can count its acknowledgements).
    fn replicating(&self, primary: u16, replica: u16) -> io::Result<()> {
        let info = self.data_command(replica, &["INFO", "replication"])?;
        let synced = info.contains("role:slave")
            && info.contains(&format!("master_port:{primary}"))
            && info.contains("master_link_status:up");
        let listed = self
            .data_command(primary, &["INFO", "replication"])?
            .lines()
            .any(|line| {
                line.starts_with("slave")
                    && line.contains(&format!("port={replica},"))
                    && line.contains("state=online")
            });
        if synced && listed {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "{replica} is not yet an online replica of {primary}"
            )))
        }
    }

    /// The first word of `ROLE` on a data node: `master` or `slave`.
    pub fn role(&self, port: u16) -> io::Result<String> {
        let role: Vec<redis::Value> = self.data_query(port, &redis::cmd("ROLE"))?;
        role.first()
            .map(String::from_redis_value_ref)
            .transpose()
            .map_err(io::Error::other)?
            .ok_or_else(|| io::Error::other("ROLE answered nothing"))
    }

    /// Runs one command on the data node on `port`, with its password, and
    /// returns the reply as text (as [`crate::harness::command`] does).
    pub fn data_command(&self, port: u16, args: &[&str]) -> io::Result<String> {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        let value: redis::Value = self.data_query(port, &cmd)?;
        Ok(match value {
            redis::Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            redis::Value::VerbatimString { text, .. } => text,
            redis::Value::SimpleString(text) => text,
            redis::Value::Int(n) => n.to_string(),
            other => format!("{other:?}"),
        })
    }

    /// Runs `cmd` on the data node on `port`, with its password.
    pub fn data_query<T: FromRedisValue>(&self, port: u16, cmd: &redis::Cmd) -> io::Result<T> {
        query(port, self.passwords.data.as_deref(), cmd)
    }

    /// Runs `cmd` on the sentinel on `port`, with its password.
    pub fn sentinel_query<T: FromRedisValue>(&self, port: u16, cmd: &redis::Cmd) -> io::Result<T> {
        query(port, self.passwords.sentinels.as_deref(), cmd)
    }

    fn reported_primary(&self, sentinel: u16) -> io::Result<u16> {
        let (_, port): (String, u16) = self.sentinel_query(
            sentinel,
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(&self.service),
        )?;
        Ok(port)
    }

    /// Retries `check` until it passes; after `guard`, its last error,
    /// with every node's log tail to say why.
    fn wait(&self, guard: Duration, mut check: impl FnMut() -> io::Result<()>) -> io::Result<()> {
        let deadline = Instant::now() + guard;
        loop {
            match check() {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() >= deadline => {
                    return Err(io::Error::other(format!(
                        "{e} (still, after {guard:?}); sentinel logs:\n{}",
                        self.logs()
                    )));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(25)),
            }
        }
    }

    /// A sentinel's log: `server.log` next to its config file, which
    /// `INFO server` names.
    fn sentinel_log(&self, sentinel: u16) -> io::Result<String> {
        let info: String = self.sentinel_query(sentinel, redis::cmd("INFO").arg("server"))?;
        let config = info
            .lines()
            .find_map(|line| line.strip_prefix("config_file:"))
            .ok_or_else(|| io::Error::other("INFO server names no config file"))?;
        let dir = std::path::Path::new(config.trim())
            .parent()
            .ok_or_else(|| io::Error::other("a config file with no directory"))?;
        std::fs::read_to_string(dir.join("server.log"))
    }

    /// The last lines of every sentinel's log, for failure messages.
    fn logs(&self) -> String {
        self.sentinels
            .iter()
            .map(|sentinel| {
                let log = self
                    .sentinel_log(sentinel.port)
                    .unwrap_or_else(|e| e.to_string());
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(15)..].join("\n");
                format!("--- sentinel {}:\n{tail}", sentinel.port)
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A sentinel on a free port that monitors nothing: asked for any
/// service, it names no primary. `None` (after the notice) when
/// `redis-server` is not installed; killed on drop.
pub fn sentinel_of_nothing() -> Option<Server> {
    if !redis_server_installed() {
        return unavailable(
            "a Redis Sentinel test",
            "redis-server is not on PATH (it runs the sentinels)",
        );
    }
    let config = ["port {port}", "bind 127.0.0.1", "dir {dir}"].join("\n");
    let sentinel = Server::start(
        "sh",
        &["-c", SENTINEL_LAUNCH, "sentinel", &config, "{dir}"],
        |port| ping(port, None),
    )
    .unwrap_or_else(|e| panic!("starting a sentinel that monitors nothing: {e}"));
    Some(sentinel)
}

/// A data node on `port` (a free one when `None`), replicating from
/// `primary` when given, with `env` added to its environment.
fn start_node(
    port: Option<u16>,
    passwords: &Passwords,
    primary: Option<u16>,
    env: &[(String, String)],
) -> io::Result<Server> {
    let mut args: Vec<String> = [
        "--port",
        "{port}",
        "--bind",
        "127.0.0.1",
        "--dir",
        "{dir}",
        "--save",
        "",
        "--appendonly",
        "no",
        // A replica that (re)joins syncs at once, not after the default 5 s.
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
    ]
    .iter()
    .map(|arg| (*arg).to_owned())
    .collect();
    if let Some(primary) = primary {
        args.extend([
            "--replicaof".to_owned(),
            "127.0.0.1".to_owned(),
            primary.to_string(),
        ]);
    }
    if let Some(password) = &passwords.data {
        args.extend([
            "--requirepass".to_owned(),
            password.clone(),
            "--masterauth".to_owned(),
            password.clone(),
        ]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let password = passwords.data.clone();
    let ready = move |port| ping(port, password.as_deref());
    match port {
        Some(port) => Server::start_at_with_env(port, "redis-server", &args, env, ready),
        None => Server::start_with_env("redis-server", &args, env, ready),
    }
}

fn ping(port: u16, password: Option<&str>) -> io::Result<()> {
    let reply: String = query(port, password, &redis::cmd("PING"))?;
    if reply == "PONG" {
        Ok(())
    } else {
        Err(io::Error::other(format!("PING answered {reply:?}")))
    }
}

/// One command on 127.0.0.1:`port` over a fresh plain connection.
fn query<T: FromRedisValue>(port: u16, password: Option<&str>, cmd: &redis::Cmd) -> io::Result<T> {
    let auth = password.map(|p| format!(":{p}@")).unwrap_or_default();
    let client =
        redis::Client::open(format!("redis://{auth}127.0.0.1:{port}")).map_err(io::Error::other)?;
    let mut connection = client
        .get_connection_with_timeout(QUERY_TIMEOUT)
        .map_err(io::Error::other)?;
    connection
        .set_read_timeout(Some(QUERY_TIMEOUT))
        .map_err(io::Error::other)?;
    connection
        .set_write_timeout(Some(QUERY_TIMEOUT))
        .map_err(io::Error::other)?;
    cmd.query(&mut connection).map_err(io::Error::other)
}

/// The `redis+sentinel://` URL of the group shared by this test binary, or
/// `None` (after the notice) when there is none.
pub fn sentinel_url() -> Option<String> {
    static SHARED: OnceLock<Result<String, String>> = OnceLock::new();
    let shared = SHARED.get_or_init(|| {
        let found = (|| {
            if !redis_server_installed() {
                return Err("redis-server is not on PATH".to_owned());
            }
            let group = Sentinels::launch(Passwords::default(), Vec::new())
                .map_err(|e| format!("a primary, a replica and sentinels: {e}"))?;
            let url = group.url();
            // Lives until the process ends; the watchdogs then stop it.
            std::mem::forget(group);
            Ok(url)
        })();
        announce(
            "Redis Sentinel",
            &found
                .as_ref()
                .map(|url| format!("a primary, a replica and three sentinels of its own: {url}"))
                .map_err(Clone::clone),
        );
        found
    });
    match shared {
        Ok(url) => Some(url.clone()),
        Err(why) => unavailable("Redis Sentinel tests", why),
    }
}

/// A manager over a fresh store on the shared group, through its sentinels.
pub async fn sentinel_manager() -> Option<LockManager> {
    sentinel_manager_with(RedisConfig::new()).await
}

/// As [`sentinel_manager`], with `config` (for example
/// [`RedisConfig::replica_acks`]).
pub async fn sentinel_manager_with(config: RedisConfig) -> Option<LockManager> {
    let url = sentinel_url()?;
    let store = RedisStore::connect_with(&url, config)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
    Some(LockManager::new(store))
}
