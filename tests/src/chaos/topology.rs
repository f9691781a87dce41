//! The store a run works against: started on free ports (PostgreSQL: the
//! machine's server, in the run's schema), reached through per-worker
//! proxies where the store allows it, restarted or failed over on demand,
//! and the fault kinds it can meaningfully suffer.

use std::path::Path;
use std::time::Duration;

use lock_core::{ConnectOptions, LockManager, PostgresConfig, RedisConfig};

use super::{FaultKind, PREFIX, StoreKind};
use crate::etcd::EtcdCluster;
use crate::harness::{RedisCluster, RedisServer};
use crate::netns::Netns;
use crate::sentinel::{Passwords, Sentinels};
use crate::server::Server;

/// Where Debian's `faketime` package puts the preload library.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// How long a failover, or the group settling after one, may take.
const FAILOVER_GUARD: Duration = Duration::from_secs(60);

/// The `application_name` of this run's PostgreSQL store connections, so
/// that a restart ends exactly those (not another run's).
fn store_application() -> String {
    format!("chaos-store-{}", std::process::id())
}

/// A manager over the store at `url`, through the library's one scheme
/// table (`lock_core::connect_with`), with the harness's prefix; the
/// PostgreSQL store keeps its table in `schema`, and a Sentinel group's
/// lease writes wait for its replica; `timeout`, when given, bounds each
/// call instead of the store's default. Retried for a while: a worker
/// started during a failover must wait for it, not die.
pub async fn connect(
    kind: StoreKind,
    url: &str,
    schema: &str,
    timeout: Option<Duration>,
) -> Result<LockManager, String> {
    let mut redis = RedisConfig::new();
    if kind == StoreKind::RedisSentinel {
        // A failover must not lose lease writes (`RedisStore`'s docs,
        // "Redis with replicas").
        redis = redis.replica_acks(1, Duration::from_secs(1));
    }
    let mut options = ConnectOptions::new()
        .redis(redis)
        // Two pooled connections a worker (and a listening one): the
        // servers a run shares, the resource's included, have only so many.
        .postgres(PostgresConfig::new().schema(schema).pool_size(2));
    if let Some(timeout) = timeout {
        options = options.timeout(timeout);
    }
    let mut last = String::new();
    for _ in 0..60 {
        match lock_core::connect_with(url, options.clone()).await {
            Ok(manager) => return Ok(manager.with_prefix(PREFIX)),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!("connecting to {kind}: {last}"))
}

/// The servers of a run.
pub enum Topology {
    /// Nothing to start.
    Memory,
    /// One `redis-server`.
    Redis(RedisServer),
    /// Three primaries with a replica each.
    RedisCluster(RedisCluster),
    /// A primary, a replica, three sentinels.
    RedisSentinel(Sentinels),
    /// One `memcached`.
    Memcached(Server),
    /// The machine's PostgreSQL at this URL.
    Postgres(tokio_postgres::Config),
    /// Three members.
    Etcd(EtcdCluster),
}

impl Topology {
    /// Starts what `kind` needs, its data servers with `env` (the
    /// [`ServerClock`](crate::server_clock::ServerClock)'s, when the run
    /// moves their clock); PostgreSQL is `postgres_url`'s server.
    pub fn start(
        kind: StoreKind,
        postgres_url: &str,
        env: &[(String, String)],
    ) -> Result<Topology, String> {
        let missing =
            |what: &str| format!("{what} is not installed; see CONTRIBUTING.md, \"Prerequisites\"");
        Ok(match kind {
            StoreKind::Memory => Topology::Memory,
            StoreKind::Redis => Topology::Redis(
                RedisServer::start_with_env(&[], env).ok_or_else(|| missing("redis-server"))?,
            ),
            StoreKind::RedisCluster => Topology::RedisCluster(
                RedisCluster::start_kept_with_env(3, 1, env)
                    .map_err(|e| format!("a Redis cluster: {e}"))?,
            ),
            StoreKind::RedisSentinel => Topology::RedisSentinel(
                Sentinels::start_with_env(Passwords::default(), env)
                    .ok_or_else(|| missing("redis-server"))?,
            ),
            StoreKind::Memcached => Topology::Memcached(
                crate::memcached::start_with_env(&[], env).ok_or_else(|| missing("memcached"))?,
            ),
            StoreKind::Postgres => Topology::Postgres(
                postgres_url
                    .parse()
                    .map_err(|e| format!("the PostgreSQL URL {postgres_url:?}: {e}"))?,
            ),
            StoreKind::Etcd => Topology::Etcd(
                EtcdCluster::start_with_or_skip(3, &[]).ok_or_else(|| missing("etcd"))?,
            ),
        })
    }

    /// The `host:port` addresses a worker's traffic to the store goes to,
    /// one proxy each; empty when the store cannot be proxied.
    pub fn upstreams(&self) -> Vec<String> {
        match self {
            Topology::Redis(server) => vec![format!("127.0.0.1:{}", server.port())],
            Topology::Memcached(server) => vec![format!("127.0.0.1:{}", server.port)],
            Topology::Postgres(config) => {
                let host = match config.get_hosts().first() {
                    Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
                    _ => "127.0.0.1".to_owned(),
                };
                let port = config.get_ports().first().copied().unwrap_or(5432);
                vec![format!("{host}:{port}")]
            }
            Topology::Etcd(cluster) => cluster
                .urls()
                .iter()
                .map(|url| url.trim_start_matches("http://").to_owned())
                .collect(),
            Topology::Memory | Topology::RedisCluster(_) | Topology::RedisSentinel(_) => Vec::new(),
        }
    }

    /// Every port on this machine a worker of this store may dial: each
    /// node of a cluster, the sentinels and both data nodes of a Sentinel
    /// group, each etcd member, the server of the others.
    pub fn ports(&self) -> Result<Vec<u16>, String> {
        let port = |address: &str| -> Result<u16, String> {
            address
                .rsplit(':')
                .next()
                .and_then(|port| port.parse().ok())
                .ok_or_else(|| format!("no port in {address:?}"))
        };
        match self {
            Topology::Memory => Ok(Vec::new()),
            Topology::RedisCluster(cluster) => cluster.urls().iter().map(|url| port(url)).collect(),
            Topology::RedisSentinel(group) => {
                let mut ports = group.sentinel_ports();
                ports.push(group.primary_port().map_err(|e| e.to_string())?);
                ports.push(group.replica_port().map_err(|e| e.to_string())?);
                Ok(ports)
            }
            _ => self
                .upstreams()
                .iter()
                .map(|address| port(address))
                .collect(),
        }
    }

    /// The URL a worker connects to, given the addresses that stand for
    /// [`upstreams`](Topology::upstreams) (its proxies', or the upstreams
    /// themselves). Several members or seeds are listed with commas.
    pub fn url(&self, addresses: &[String]) -> String {
        let each = |scheme: &str| {
            addresses
                .iter()
                .map(|address| format!("{scheme}://{address}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        match self {
            Topology::Memory => "memory://".to_owned(),
            Topology::Redis(_) => each("redis"),
            Topology::Memcached(_) => each("memcache"),
            Topology::Etcd(_) => each("http"),
            Topology::RedisCluster(cluster) => cluster.urls().join(","),
            Topology::RedisSentinel(group) => group.url(),
            Topology::Postgres(config) => {
                let user = config.get_user().unwrap_or("postgres");
                let password = config
                    .get_password()
                    .map(|password| format!(":{}", String::from_utf8_lossy(password)))
                    .unwrap_or_default();
                let database = config.get_dbname().unwrap_or("postgres");
                let application = store_application();
                let address = addresses.first().map_or("127.0.0.1:5432", String::as_str);
                format!(
                    "postgres://{user}{password}@{address}/{database}?application_name={application}"
                )
            }
        }
    }

    /// The URL without proxies, for the harness's own look at the store.
    pub fn direct_url(&self) -> String {
        self.url(&self.upstreams())
    }

    /// The fault kinds this store suffers, and those it is spared, each
    /// with the reason. `clock` says why the servers' clock cannot be
    /// moved in this run, if it cannot.
    pub fn faults(&self, clock: Option<&str>) -> (Vec<FaultKind>, Vec<(FaultKind, String)>) {
        let mut supported = Vec::new();
        let mut skipped = Vec::new();
        for kind in FaultKind::ALL {
            let why = match (kind, clock) {
                (FaultKind::ServerClock, Some(why)) if self.skip_reason(kind).is_none() => {
                    Some(why.to_owned())
                }
                _ => self.skip_reason(kind).map(str::to_owned),
            };
            match why {
                Some(why) => skipped.push((kind, why)),
                None => supported.push(kind),
            }
        }
        (supported, skipped)
    }

    /// Why a server clock fault means nothing for `kind`, if it does not:
    /// the run then makes no [`ServerClock`](crate::server_clock::ServerClock).
    pub fn server_clock_skipped(kind: StoreKind) -> Option<&'static str> {
        match kind {
            StoreKind::Memory => Some("no server"),
            StoreKind::Postgres => Some(
                "the machine's server keeps the run's records too, on the one clock every process shares: moving it would move the records' clock",
            ),
            StoreKind::Etcd => Some(
                "etcd is a Go program: it reads the clock without the C library, so no preloaded library can move it (its leases run on the leader's monotonic clock)",
            ),
            _ => None,
        }
    }

    fn skip_reason(&self, kind: FaultKind) -> Option<&'static str> {
        let faketime = Path::new(LIBFAKETIME).exists();
        let store = match self {
            Topology::Memory => StoreKind::Memory,
            Topology::Redis(_) => StoreKind::Redis,
            Topology::RedisCluster(_) => StoreKind::RedisCluster,
            Topology::RedisSentinel(_) => StoreKind::RedisSentinel,
            Topology::Memcached(_) => StoreKind::Memcached,
            Topology::Postgres(_) => StoreKind::Postgres,
            Topology::Etcd(_) => StoreKind::Etcd,
        };
        match (self, kind) {
            (_, FaultKind::ServerClock) => Topology::server_clock_skipped(store),
            (_, FaultKind::PauseWrite) if !store.fences() => Some(
                "no fencing tokens: a write that arrives stale cannot be told from a fresh one",
            ),
            (Topology::Memory, FaultKind::PauseWrite) => None,
            (_, FaultKind::Clock) if !faketime => {
                Some("libfaketime is not installed (apt-get install faketime)")
            }
            (_, FaultKind::Clock) => None,
            (Topology::Memory, FaultKind::Pause | FaultKind::Kill) => Some(
                "the store lives in the worker process: pausing or killing it pauses or ends the store with every holder",
            ),
            (Topology::Memory, _) => Some("no server and no network"),
            (Topology::RedisCluster(_) | Topology::RedisSentinel(_), kind)
                if kind.network() && !Netns::available() =>
            {
                Some(
                    "clients follow the addresses the servers announce (cluster slots, the sentinels' primary), which only a worker in a network namespace of its own can be made to reach through a proxy, and this machine cannot make one (root and iproute2 are needed)",
                )
            }
            (
                Topology::Redis(_) | Topology::Memcached(_) | Topology::Postgres(_),
                FaultKind::Failover,
            ) => Some("one server: nothing to fail over to"),
            _ => None,
        }
    }

    /// The names whose leases a store-wide fault of `kind`, made with
    /// `choice`, can take, of `names` (lock names without the prefix);
    /// `None` for every name. On a cluster a primary's restart or failover
    /// touches only the names whose slots it serves: the same primary
    /// [`restart`](Topology::restart) and [`failover`](Topology::failover)
    /// pick for `choice`, asked before the fault.
    pub fn touched_names(
        &self,
        kind: FaultKind,
        choice: u64,
        names: &[String],
    ) -> Result<Option<Vec<String>>, String> {
        let Topology::RedisCluster(cluster) = self else {
            return Ok(None);
        };
        if !matches!(kind, FaultKind::Restart | FaultKind::Failover) {
            return Ok(None);
        }
        let primaries = cluster.primary_ports().map_err(|e| e.to_string())?;
        let port = primaries[choice as usize % primaries.len()];
        let nodes = crate::harness::command(port, &["CLUSTER", "NODES"])
            .map_err(|e| format!("asking {port} for the cluster's nodes: {e}"))?;
        let ranges = served_slots(&nodes, port);
        let mut touched = Vec::new();
        for name in names {
            // The lease key's hash tag is the whole prefixed name
            // (`RedisStore`'s docs, "Keys").
            let key = format!("{{{PREFIX}{name}}}");
            let slot: u16 = crate::harness::command(port, &["CLUSTER", "KEYSLOT", &key])
                .map_err(|e| format!("the slot of {key}: {e}"))?
                .parse()
                .map_err(|e| format!("the slot of {key}: {e}"))?;
            if ranges
                .iter()
                .any(|(low, high)| (*low..=*high).contains(&slot))
            {
                touched.push(name.clone());
            }
        }
        Ok(Some(touched))
    }

    /// Restarts the store's server, or one of them; says what it did.
    pub fn restart(&mut self, choice: u64) -> Result<String, String> {
        match self {
            Topology::Redis(server) => {
                server
                    .restart()
                    .map_err(|e| format!("restarting Redis: {e}"))?;
                Ok("redis-server killed and started again, empty".to_owned())
            }
            Topology::Memcached(server) => {
                server
                    .restart(crate::memcached::ready)
                    .map_err(|e| format!("restarting memcached: {e}"))?;
                Ok("memcached killed and started again, empty".to_owned())
            }
            Topology::Postgres(config) => terminate_store_connections(config),
            Topology::Etcd(cluster) => {
                let leader = cluster.leader_index().map_err(|e| e.to_string())?;
                let count = cluster.urls().len();
                let follower = (leader + 1 + (choice as usize % (count - 1))) % count;
                cluster
                    .restart(follower)
                    .map_err(|e| format!("restarting member {follower}: {e}"))?;
                Ok(format!("follower m{follower} killed and started again"))
            }
            Topology::RedisCluster(cluster) => {
                let primaries = cluster.primary_ports().map_err(|e| e.to_string())?;
                let port = primaries[choice as usize % primaries.len()];
                // Back before the cluster calls it down: it returns empty,
                // and its replica syncs the emptiness.
                cluster
                    .kill_node(port)
                    .and_then(|()| cluster.restart_node(port))
                    .map_err(|e| format!("restarting primary {port}: {e}"))?;
                Ok(format!(
                    "primary {port} killed and started again at once, empty"
                ))
            }
            Topology::RedisSentinel(group) => {
                let port = group
                    .stop_replica()
                    .map_err(|e| format!("stopping the replica: {e}"))?;
                group
                    .start_replica(FAILOVER_GUARD)
                    .map_err(|e| format!("starting the replica again: {e}"))?;
                Ok(format!("replica {port} killed and started again, empty"))
            }
            Topology::Memory => Err("the memory store has no server".to_owned()),
        }
    }

    /// Kills the primary (or leader) so another takes over, and brings the
    /// old one back; says what happened.
    pub fn failover(&mut self, choice: u64) -> Result<String, String> {
        match self {
            Topology::RedisSentinel(group) => {
                let old = group
                    .kill_primary()
                    .map_err(|e| format!("killing the primary: {e}"))?;
                let new = group
                    .wait_for_failover(old, FAILOVER_GUARD)
                    .map_err(|e| format!("waiting for the failover: {e}"))?;
                group
                    .bring_back(old, FAILOVER_GUARD)
                    .map_err(|e| format!("bringing {old} back: {e}"))?;
                Ok(format!(
                    "primary {old} killed; {new} promoted; {old} back as its replica"
                ))
            }
            Topology::RedisCluster(cluster) => {
                let primaries = cluster.primary_ports().map_err(|e| e.to_string())?;
                let old = primaries[choice as usize % primaries.len()];
                cluster
                    .kill_node(old)
                    .map_err(|e| format!("killing primary {old}: {e}"))?;
                let new = cluster
                    .wait_for_promotion(old, FAILOVER_GUARD)
                    .map_err(|e| format!("waiting for {old}'s replica to take over: {e}"))?;
                cluster
                    .restart_node(old)
                    .map_err(|e| format!("bringing {old} back: {e}"))?;
                Ok(format!(
                    "primary {old} killed; {new} promoted; {old} back as its replica"
                ))
            }
            Topology::Etcd(cluster) => {
                let leader = cluster.leader_index().map_err(|e| e.to_string())?;
                cluster
                    .restart(leader)
                    .map_err(|e| format!("restarting the leader m{leader}: {e}"))?;
                let now = cluster.leader_index().map_err(|e| e.to_string())?;
                Ok(format!(
                    "leader m{leader} killed and started again; m{now} leads"
                ))
            }
            _ => Err("this store has nothing to fail over to".to_owned()),
        }
    }
}

/// The slot ranges the node on `port` serves, read from `CLUSTER NODES`
/// (`<id> 127.0.0.1:<port>@<bus> <flags> ... <link> <slot or low-high>...`).
fn served_slots(nodes: &str, port: u16) -> Vec<(u16, u16)> {
    let address = format!(":{port}@");
    nodes
        .lines()
        .filter(|line| {
            line.split_whitespace()
                .nth(1)
                .is_some_and(|a| a.contains(&address))
        })
        .flat_map(|line| {
            line.split_whitespace()
                .skip(8)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter_map(|range| {
            let (low, high) = range
                .split_once('-')
                .unwrap_or((range.as_str(), range.as_str()));
            Some((low.parse().ok()?, high.parse().ok()?))
        })
        .collect()
}

/// PostgreSQL's "restart" as the store sees one: every connection of the
/// store ended by the server, transactions in flight rolled back. (The
/// machine's server is shared with the resource and is not restarted.)
fn terminate_store_connections(config: &tokio_postgres::Config) -> Result<String, String> {
    let config = config.clone();
    // A thread and runtime of its own: the caller may be inside a runtime.
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(terminate(config))
    })
    .join()
    .map_err(|_| "ending the store's connections panicked".to_owned())?
}

async fn terminate(config: tokio_postgres::Config) -> Result<String, String> {
    {
        let (client, connection) = config
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(|e| format!("connecting to end the store's connections: {e}"))?;
        tokio::spawn(connection);
        let row = client
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                 WHERE application_name = $1",
                &[&store_application()],
            )
            .await
            .map_err(|e| format!("ending the store's connections: {e}"))?;
        let ended: i64 = row.get(0);
        if ended == 0 {
            return Err("the store had no connection to end".to_owned());
        }
        Ok(format!(
            "{ended} store connections terminated by the server"
        ))
    }
}
