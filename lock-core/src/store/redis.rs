//! Leases in Redis or Redis Cluster: visible to every process that can reach
//! the server.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use ::redis::aio::PubSubStream;
use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig, PubSubSink};
use ::redis::cluster::ClusterClient;
use ::redis::cluster_async::ClusterConnection;
use ::redis::{
    Client, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Script, ServerErrorKind, Value,
};
use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;
use tokio::task::JoinHandle;

use super::backoff::Backoff;
use super::{AcquireRequest, Attempt, BoxFuture, LockStore, Wakeup};
use crate::{Error, Holder, Result};

/// The longest TTL the Redis store accepts: 100 years, far inside what
/// Redis's millisecond expiry arithmetic can represent.
const MAX_TTL: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// How long past the holder's expiry the "somebody waits" marker lives, so it
/// outlasts the waiters' naps (expiry plus at most a few tens of ms of jitter).
const WAITERS_MARGIN_MS: u64 = 250;

/// How often the subscription checks that its server still answers.
const PING_EVERY: Duration = Duration::from_secs(5);

/// Bounds of the pause between attempts to re-establish the subscription.
const RESUBSCRIBE_MIN: Duration = Duration::from_millis(50);
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(1);

/// A subscription that stayed up this long was healthy: after it ends, the
/// first attempt to resubscribe comes after the shortest pause again.
const SUBSCRIPTION_HEALTHY: Duration = Duration::from_secs(10);

/// The default pub/sub channel releases are announced on.
const DEFAULT_CHANNEL: &str = "lock-core:released";

/// The default bound on every call.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);

/// KEYS: lease, waiters marker, fencing counter. ARGV: token, ttl ms, "1" when
/// the caller waits, marker margin ms, "1" when the caller wants a fencing
/// token. Returns `{1, fence}` when acquired (fence 0 when not asked for),
/// `{0, remaining ms}` when held.
const ACQUIRE: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[5] == '1' then
    return {1, redis.call('INCR', KEYS[3])}
  end
  return {1, 0}
end
local remaining = redis.call('PTTL', KEYS[1])
if remaining < 0 then
  -- A value without expiry was written by something else: report our own
  -- ttl so waiters nap instead of spinning.
  remaining = tonumber(ARGV[2])
end
if ARGV[3] == '1' then
  local want = remaining + tonumber(ARGV[4])
  if redis.call('PTTL', KEYS[2]) < want then
    redis.call('SET', KEYS[2], '1', 'PX', want)
  end
end
return {0, remaining}
";

/// KEYS: lease, waiters marker. ARGV: token, channel. Publishes the lease
/// key when somebody waits. Returns 1 when the lease was ours and is gone,
/// 0 otherwise.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('PUBLISH', ARGV[2], KEYS[1])
end
return 1
";

/// KEYS: lease. ARGV: token, ttl ms. Returns 1 when extended, 0 otherwise.
const EXTEND: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
";

/// KEYS: lease, waiters marker. ARGV: channel. Publishes the lease key when
/// somebody waits. Returns 1 when there was a lease, 0 otherwise.
const FORCE_RELEASE: &str = r"
if redis.call('DEL', KEYS[1]) == 0 then
  return 0
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('PUBLISH', ARGV[1], KEYS[1])
end
return 1
";

/// KEYS: lease. Returns nil when free, `{token, remaining ms}` when held
/// (remaining is -1 for a value without expiry).
const HOLDER: &str = r"
local token = redis.call('GET', KEYS[1])
if not token then
  return false
end
return {token, redis.call('PTTL', KEYS[1])}
";

/// How a [`RedisStore`] behaves: its time bound and its release channel.
///
/// ```
/// use std::time::Duration;
/// use lock_core::RedisConfig;
///
/// let config = RedisConfig::new()
///     .timeout(Duration::from_secs(1))
///     .channel("billing:lock-released");
/// # let _ = config;
/// ```
#[derive(Clone, Debug)]
#[must_use = "a RedisConfig does nothing until passed to a RedisStore constructor"]
pub struct RedisConfig {
    timeout: Duration,
    channel: String,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            timeout: DEFAULT_TIMEOUT,
            channel: DEFAULT_CHANNEL.to_owned(),
        }
    }
}

impl RedisConfig {
    /// The defaults: a 3 s timeout and the channel `lock-core:released`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The longest any one call (connect, acquire, release, extend...) may
    /// take before it fails with [`Error::Store`]. Default 3 s.
    ///
    /// This is what bounds a call while Redis is down or unreachable. Too short
    /// a bound turns a slow but healthy server into errors; too long a bound
    /// stalls callers during an outage. A zero timeout is raised to 1 ms.
    pub fn timeout(self, timeout: Duration) -> Self {
        RedisConfig {
            timeout: timeout.max(Duration::from_millis(1)),
            ..self
        }
    }

    /// The pub/sub channel releases are announced on. Default
    /// `lock-core:released`.
    ///
    /// Every process sharing locks must use the same channel, or waiters in
    /// one will not hear releases from another (they still wake when the
    /// holder's TTL runs out). A separate channel per application keeps one
    /// application's releases from reaching another's subscription.
    pub fn channel(self, channel: impl Into<String>) -> Self {
        RedisConfig {
            channel: channel.into(),
            ..self
        }
    }
}

/// Leases kept in Redis or Redis Cluster, shared by every process that
/// reaches the server.
///
/// ```no_run
/// # #[tokio::main] async fn main() -> lock_core::Result<()> {
/// use std::time::Duration;
/// use lock_core::{LockManager, RedisStore};
///
/// let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
/// let locks = LockManager::new(store);
/// assert!(locks.is_shared());
///
/// let ran = locks
///     .lock("nightly-export", Duration::from_secs(600))
///     .run(async { Ok::<_, lock_core::Error>("exported") })
///     .await?;
/// println!("{ran:?}"); // Some("exported") here, None if another process held it
/// # Ok(()) }
/// ```
///
/// Cloning is cheap: clones share the connections and the one release
/// subscription. A store runs on the tokio runtime it was created in (its
/// background tasks live there); build it inside that runtime and use it
/// there.
///
/// # One round trip per operation
///
/// Each operation is one round trip: a Lua script sent by its SHA1 hash
/// (`EVALSHA`), or, for an acquire that neither waits nor is fenced, the
/// native `SET NX PX` alone (a script call costs the server several times a
/// native `SET`, and the server's CPU is what bounds throughput when many
/// tasks share one Redis). A server that does not know a script (it
/// restarted, or its script cache was flushed) answers `NOSCRIPT`; the script
/// is then loaded and the call retried once, transparently. The scripts are
/// loaded when the store connects, so in the steady state every operation
/// costs exactly one round trip:
///
/// | operation | script |
/// |---|---|
/// | acquire, not waiting | the native `SET key token NX PX ttl`, no script |
/// | acquire, waiting or fenced | one script: `SET key token NX PX ttl`; if that fails, `PTTL key` and mark the key as waited for; for a fenced lock, `INCR` of its counter |
/// | release | `GET key == token` then `DEL key` and, if anyone waits, `PUBLISH` |
/// | extend | `GET key == token` then `PEXPIRE key ttl` |
///
/// # Keys and cluster slots
///
/// A lease for the store key `lock:reports:acme` lives in the Redis key
/// `{lock:reports:acme}`, and the marker "somebody waits for it" in
/// `{lock:reports:acme}:waiters`; a fenced lock's counter lives in
/// `{lock:reports:acme}:fence`, which never expires (one small key per fenced
/// name). The braces make the whole store key the
/// [hash tag], so both keys of one script are always in one cluster slot
/// (no `CROSSSLOT`), while different lock names spread across slots. A `}`
/// inside a name would end the tag early, so `%` and `}` in the store key are
/// written as `%25` and `%7D`: the tag is always exactly the (escaped) name,
/// whatever characters it contains.
///
/// [hash tag]: https://redis.io/docs/latest/operate/oss_and_stack/reference/cluster-spec/#hash-tags
///
/// # Waking waiters without polling
///
/// Each store keeps ONE pub/sub subscription, to one channel
/// ([`RedisConfig::channel`], by default `lock-core:released`), and it serves
/// every waiter of the process:
///
/// ```text
/// waiter                         store (this process)              Redis
/// register interest in key  -->  key -> Notify map
/// acquire script            -------------------------------->  held: PTTL, mark key as waited for
///                                                         <--  { held, 1830 ms }
/// sleep: release | ttl | deadline
///                                                     holder:  release script: DEL, PUBLISH lease key
///                                subscription receives key <--
/// wake one local waiter     <--  Notify
/// acquire script            -------------------------------->  SET NX PX ... ours
/// ```
///
/// Interest is registered *before* the acquire script is sent, so a release
/// that races with the attempt still wakes the waiter. A release only
/// publishes when the key is marked as waited for, so uncontended locks cost
/// no pub/sub traffic. On a cluster a plain `PUBLISH` reaches every node, so
/// the subscription may sit on any one of them.
///
/// # Faults
///
/// Every call is bounded by [`RedisConfig::timeout`] (3 s by default): with
/// Redis down, calls return [`Error::Store`] within that time, never hang and
/// never panic. The connections reconnect on their own in the background, so
/// the same store works again once Redis is back. While the subscription is
/// down, waiters still wake when the holder's TTL runs out or at their
/// deadline; after it comes back, every local waiter retries once, in case a
/// release was missed.
///
/// # The guarantee, stated honestly
///
/// Exclusion holds for every process that uses the same Redis (or cluster)
/// and key prefix: acquire is one atomic `SET NX PX`, release and extend
/// compare the owner token in one script, and TTLs run on the server's clock.
/// It is a lease, not a mutex: a holder that overruns its TTL can run
/// alongside the next one. It is exactly as durable as Redis: with
/// asynchronous replication, a primary that fails over before replicating a
/// fresh lease can let a second holder in; Redis persistence settings decide
/// what a restart forgets. An acquire that times out may still have taken the
/// lease on the server; the store then gives it back in the background, and
/// failing that, it ends at its TTL.
#[derive(Clone)]
pub struct RedisStore {
    shared: Arc<Shared>,
}

struct Shared {
    connection: Connection,
    scripts: Scripts,
    waiters: Arc<Waiters>,
    config: RedisConfig,
    /// `host:port` of each node given, for `Debug`. Never a password.
    nodes: Vec<String>,
    listener: JoinHandle<()>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

struct Scripts {
    acquire: Script,
    release: Script,
    extend: Script,
    force_release: Script,
    holder: Script,
}

impl Scripts {
    fn new() -> Self {
        Scripts {
            acquire: Script::new(ACQUIRE),
            release: Script::new(RELEASE),
            extend: Script::new(EXTEND),
            force_release: Script::new(FORCE_RELEASE),
            holder: Script::new(HOLDER),
        }
    }

    fn all(&self) -> [&Script; 5] {
        [
            &self.acquire,
            &self.release,
            &self.extend,
            &self.force_release,
            &self.holder,
        ]
    }
}

/// The command connection: one reconnecting multiplexed connection to a
/// single server, or the cluster client's connection (which follows
/// `MOVED`/`ASK` and refreshes its slot map).
#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(connection) => connection.req_packed_command(cmd),
            Connection::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(connection) => connection.req_packed_commands(cmd, offset, count),
            Connection::Cluster(connection) => connection.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(connection) => connection.get_db(),
            Connection::Cluster(connection) => connection.get_db(),
        }
    }
}

impl RedisStore {
    /// Connects to one Redis server, with the default [`RedisConfig`].
    ///
    /// `url` is `redis://[user:password@]host[:port][/db]`, `rediss://` for
    /// TLS (with lock-core's `redis-tls` feature), or `redis+unix:///path`.
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when the URL is invalid or the server cannot be
    /// reached, or does not answer, within the timeout.
    pub async fn connect(url: &str) -> Result<RedisStore> {
        Self::connect_with(url, RedisConfig::default()).await
    }

    /// Connects to one Redis server, with `config`.
    ///
    /// # Errors
    ///
    /// As [`connect`](RedisStore::connect).
    pub async fn connect_with(url: &str, config: RedisConfig) -> Result<RedisStore> {
        let client = open_client(url)?;
        Self::from_client(client, config).await
    }

    /// Connects to a Redis Cluster through any of its nodes, with the default
    /// [`RedisConfig`].
    ///
    /// `urls` are the seed nodes; the rest of the cluster is discovered from
    /// them. Give several, so the store can start while one of them is down.
    /// The release subscription uses the first seed that answers.
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when `urls` is empty, a URL is invalid, or no seed
    /// answers within the timeout.
    pub async fn cluster(urls: &[&str]) -> Result<RedisStore> {
        Self::cluster_with(urls, RedisConfig::default()).await
    }

    /// Connects to a Redis Cluster through any of its nodes, with `config`.
    ///
    /// # Errors
    ///
    /// As [`cluster`](RedisStore::cluster).
    pub async fn cluster_with(urls: &[&str], config: RedisConfig) -> Result<RedisStore> {
        if urls.is_empty() {
            return Err(Error::store(
                "connect",
                "(no cluster nodes)",
                "no cluster node URLs were given; pass at least one, for example \"redis://10.0.0.1:6379\"",
            ));
        }
        let subscribers = urls
            .iter()
            .map(|url| open_client(url))
            .collect::<Result<Vec<_>>>()?;
        let client = ClusterClient::builder(urls.iter().copied())
            .connection_timeout(config.timeout)
            .response_timeout(config.timeout)
            .build()
            .map_err(|e| connect_error("(cluster nodes)", e.into()))?;
        Self::from_cluster_client(client, subscribers, config).await
    }

    /// A store over an already configured single-server client.
    ///
    /// For applications that set up [`redis::Client`](::redis::Client)
    /// themselves (credentials providers, TCP settings...). The store opens
    /// its own connections from it: one reconnecting connection for
    /// commands, one for the release subscription.
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when the server cannot be reached within the timeout.
    pub async fn from_client(client: Client, config: RedisConfig) -> Result<RedisStore> {
        let node = client.get_connection_info().addr().to_string();
        // No response timeout of the connection's own: every call is already
        // bounded by `config.timeout` in `bounded`, and a second timer per
        // call costs measurable client CPU under load.
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.timeout))
            .set_response_timeout(None)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(1))
            .set_number_of_retries(4);
        let connecting = ConnectionManager::new_with_config(client.clone(), manager_config);
        let manager = bounded(config.timeout, connecting)
            .await
            .map_err(|e| connect_error(&node, e))?;
        Self::start(
            Connection::Single(manager),
            vec![client],
            vec![node],
            config,
        )
        .await
    }

    /// A store over an already configured cluster client.
    ///
    /// `subscribers` are plain clients for one or more nodes of that cluster;
    /// the store keeps its one release subscription on the first that answers,
    /// moving to the next when it fails. (A release published on any node of
    /// a cluster reaches subscribers on every node.)
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when `subscribers` is empty, or the cluster or every
    /// subscriber node cannot be reached within the timeout.
    pub async fn from_cluster_client(
        client: ClusterClient,
        subscribers: Vec<Client>,
        config: RedisConfig,
    ) -> Result<RedisStore> {
        if subscribers.is_empty() {
            return Err(Error::store(
                "connect",
                "(cluster)",
                "no subscriber clients were given; pass a `redis::Client` for at least one cluster node",
            ));
        }
        let nodes: Vec<String> = subscribers
            .iter()
            .map(|c| c.get_connection_info().addr().to_string())
            .collect();
        let connection = bounded(config.timeout, client.get_async_connection())
            .await
            .map_err(|e| connect_error(&nodes.join(","), e))?;
        Self::start(Connection::Cluster(connection), subscribers, nodes, config).await
    }

    /// Loads the scripts, subscribes, and starts the listener.
    async fn start(
        connection: Connection,
        subscribers: Vec<Client>,
        nodes: Vec<String>,
        config: RedisConfig,
    ) -> Result<RedisStore> {
        let scripts = Scripts::new();
        let joined = nodes.join(",");
        // Loaded up front so the first acquire costs one round trip; on a
        // cluster, SCRIPT LOAD reaches every primary.
        for script in scripts.all() {
            let mut connection = connection.clone();
            bounded(
                config.timeout,
                script.prepare_invoke().load_async(&mut connection),
            )
            .await
            .map_err(|e| connect_error(&joined, e))?;
        }
        let waiters = Arc::new(Waiters::default());
        let listener = Listener {
            subscribers,
            channel: config.channel.clone(),
            timeout: config.timeout,
            waiters: Arc::clone(&waiters),
        };
        // Subscribe before returning, so the very first waiter can be woken.
        let (index, subscription) = listener.subscribe_any(0).await.map_err(|e| {
            Error::store(
                "subscribe",
                joined.clone(),
                format!("could not subscribe to release notifications: {e}"),
            )
        })?;
        let listener = tokio::spawn(listener.run(index, subscription));
        Ok(RedisStore {
            shared: Arc::new(Shared {
                connection,
                scripts,
                waiters,
                config,
                nodes,
                listener,
            }),
        })
    }

    /// The configuration the store runs with.
    pub fn config(&self) -> &RedisConfig {
        &self.shared.config
    }

    /// Runs one script call, built by [`evalsha`], under the store's time
    /// bound; loads the script and retries once when the server does not
    /// know it (it restarted, or its script cache was flushed).
    async fn invoke<T: ::redis::FromRedisValue>(
        &self,
        operation: &'static str,
        key: &str,
        script: &Script,
        call: &Cmd,
    ) -> Result<T> {
        let mut connection = self.shared.connection.clone();
        let timeout = self.shared.config.timeout;
        // One deadline for the whole call: a reload and retry after NOSCRIPT
        // gets what is left of it, not a fresh timeout of its own.
        let deadline = tokio::time::Instant::now() + timeout;
        let reply = match bounded_until(deadline, timeout, call.query_async(&mut connection)).await
        {
            Err(Failure::Redis(error))
                if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
            {
                let reload = async {
                    script.prepare_invoke().load_async(&mut connection).await?;
                    call.query_async(&mut connection).await
                };
                bounded_until(deadline, timeout, reload).await
            }
            reply => reply,
        };
        reply.map_err(|e| Error::store(operation, key, e))
    }
}

/// `EVALSHA <hash> <number of keys> <keys>...`, for the caller to append the
/// arguments to. Built as one command rather than through
/// `Script::prepare_invoke`, which copies every key and argument into
/// buffers of its own on each call.
fn evalsha(script: &Script, keys: &[&str]) -> Cmd {
    // Sized once: the hash, the key count, the keys, and room for the few
    // short arguments every script here takes, so the buffer never regrows.
    let key_bytes: usize = keys.iter().map(|key| key.len()).sum();
    let mut call = Cmd::with_capacity(keys.len() + 8, 64 + key_bytes + 128);
    call.arg("EVALSHA").arg(script.get_hash()).arg(keys.len());
    for key in keys {
        call.arg(*key);
    }
    call
}

/// The Redis key of a lease: the escaped store key, wrapped in braces so it
/// is the hash tag.
fn lease_key(key: &str) -> Result<String> {
    if key.is_empty() {
        return Err(Error::InvalidName {
            name: String::new(),
            reason: "a lock key must not be empty; give the lock a name",
        });
    }
    let mut out = String::with_capacity(key.len() + 8);
    out.push('{');
    // Runs between the characters that need escaping are copied whole.
    let mut rest = key;
    while let Some(at) = rest.find(['%', '}']) {
        out.push_str(&rest[..at]);
        out.push_str(if rest.as_bytes()[at] == b'%' {
            "%25"
        } else {
            "%7D"
        });
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
    out.push('}');
    Ok(out)
}

/// The Redis key marking that somebody waits for the lease `lease`; same slot.
fn waiters_key(lease: &str) -> String {
    suffixed(lease, ":waiters")
}

/// `lease` followed by `suffix`, without the formatting machinery (this runs
/// on every release).
fn suffixed(lease: &str, suffix: &str) -> String {
    let mut key = String::with_capacity(lease.len() + suffix.len());
    key.push_str(lease);
    key.push_str(suffix);
    key
}

/// The Redis key of the fencing counter of the lease `lease`; same slot. It
/// has no expiry: a counter that vanished would start again at 1 and hand
/// out tokens older than ones already seen.
fn fence_key(lease: &str) -> String {
    suffixed(lease, ":fence")
}

/// `duration` in whole milliseconds, rounded up (a lease is kept at least as
/// long as asked, never less), and at least 1.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000_000))
        .unwrap_or(u64::MAX)
        .max(1)
}

fn open_client(url: &str) -> Result<Client> {
    Client::open(url).map_err(|e| {
        // The URL may hold a password: name only the scheme and host.
        let shown = redacted(url);
        if e.to_string().contains("TLS") || url.starts_with("rediss") {
            Error::store(
                "connect",
                shown,
                format!(
                    "{e}; `rediss://` URLs need lock-core's `redis-tls` feature, and the URL must be valid"
                ),
            )
        } else {
            Error::store(
                "connect",
                shown,
                format!("{e}; use a URL like redis://[user:password@]host:6379[/db]"),
            )
        }
    })
}

/// `url` with any `user:password@` part removed.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

fn connect_error(node: &str, error: Failure) -> Error {
    Error::store("connect", node, error)
}

/// Why a bounded call failed.
#[derive(Debug)]
enum Failure {
    Redis(RedisError),
    TimedOut(Duration),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Redis(e) => write!(f, "redis: {e}"),
            Failure::TimedOut(after) => write!(
                f,
                "no answer from Redis within {after:?} (raise RedisConfig::timeout if the server is just slow)"
            ),
        }
    }
}

impl std::error::Error for Failure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Failure::Redis(e) => Some(e),
            Failure::TimedOut(_) => None,
        }
    }
}

impl From<RedisError> for Failure {
    fn from(e: RedisError) -> Self {
        Failure::Redis(e)
    }
}

async fn bounded<T, E: Into<Failure>>(
    timeout: Duration,
    work: impl Future<Output = std::result::Result<T, E>>,
) -> std::result::Result<T, Failure> {
    bounded_until(tokio::time::Instant::now() + timeout, timeout, work).await
}

/// `work`, unless `deadline` passes first: the part of a call of at most
/// `timeout` (named in the error) that is left.
async fn bounded_until<T, E: Into<Failure>>(
    deadline: tokio::time::Instant,
    timeout: Duration,
    work: impl Future<Output = std::result::Result<T, E>>,
) -> std::result::Result<T, Failure> {
    match tokio::time::timeout_at(deadline, work).await {
        Ok(result) => result.map_err(Into::into),
        Err(_) => Err(Failure::TimedOut(timeout)),
    }
}

impl LockStore for RedisStore {
    fn acquire<'a>(&'a self, request: AcquireRequest<'a>) -> BoxFuture<'a, Result<Attempt>> {
        Box::pin(async move {
            let lease = lease_key(request.key)?;
            // A failed or dropped acquire may still have set the lease on
            // the server; the runtime gives it back (see the store contract).
            if request.wake || request.fenced {
                self.acquire_scripted(request, &lease).await
            } else {
                self.acquire_plain(request, &lease).await
            }
        })
    }

    fn release<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let lease = lease_key(key)?;
            let script = &self.shared.scripts.release;
            let mut call = evalsha(script, &[&lease, &waiters_key(&lease)]);
            call.arg(token).arg(&self.shared.config.channel);
            let released: i64 = self.invoke("release", key, script, &call).await?;
            Ok(released == 1)
        })
    }

    fn extend<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let lease = lease_key(key)?;
            let script = &self.shared.scripts.extend;
            let mut call = evalsha(script, &[&lease]);
            call.arg(token).arg(millis(ttl));
            let extended: i64 = self.invoke("extend", key, script, &call).await?;
            Ok(extended == 1)
        })
    }

    fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let lease = lease_key(key)?;
            let script = &self.shared.scripts.force_release;
            let mut call = evalsha(script, &[&lease, &waiters_key(&lease)]);
            call.arg(&self.shared.config.channel);
            let released: i64 = self.invoke("force-release", key, script, &call).await?;
            Ok(released == 1)
        })
    }

    fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Holder>>> {
        Box::pin(async move {
            let lease = lease_key(key)?;
            let script = &self.shared.scripts.holder;
            let call = evalsha(script, &[&lease]);
            let found: Option<(Vec<u8>, i64)> = self
                .invoke("read the holder of", key, script, &call)
                .await?;
            Ok(found.map(|(token, remaining)| {
                let remaining = if remaining < 0 {
                    // No expiry: written by something other than this library.
                    Duration::MAX
                } else {
                    Duration::from_millis(remaining.unsigned_abs())
                };
                Holder::new(String::from_utf8_lossy(&token), remaining)
            }))
        })
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn max_ttl(&self) -> Duration {
        MAX_TTL
    }

    fn fencing(&self) -> bool {
        true
    }
}

impl RedisStore {
    /// An acquire that neither waits nor wants a fencing token: the native
    /// `SET key token NX PX ttl`, the atomic set-if-absent, alone.
    ///
    /// A caller that does not wait has no use for the holder's remaining TTL,
    /// so it is not read; and a native command costs the server a fraction of
    /// a script call, which is what bounds throughput when many tasks share
    /// one Redis.
    async fn acquire_plain(&self, request: AcquireRequest<'_>, lease: &str) -> Result<Attempt> {
        let mut set = ::redis::cmd("SET");
        set.arg(lease)
            .arg(request.token)
            .arg("NX")
            .arg("PX")
            .arg(millis(request.ttl));
        let mut connection = self.shared.connection.clone();
        let reply: Option<::redis::Value> =
            bounded(self.shared.config.timeout, set.query_async(&mut connection))
                .await
                .map_err(|e| Error::store("acquire", request.key, e))?;
        Ok(if reply.is_some() {
            Attempt::Acquired { fence: None }
        } else {
            Attempt::Held {
                remaining: None,
                wakeup: None,
            }
        })
    }

    /// An acquire that waits or wants a fencing token: one script, so that
    /// marking the key as waited for (or taking the next fencing token)
    /// happens atomically with the set-if-absent.
    async fn acquire_scripted(&self, request: AcquireRequest<'_>, lease: &str) -> Result<Attempt> {
        // Before the script: a release that lands between the script and our
        // sleep must still wake us.
        let interest = request.wake.then(|| self.shared.waiters.register(lease));
        let script = &self.shared.scripts.acquire;
        let mut call = evalsha(script, &[lease, &waiters_key(lease), &fence_key(lease)]);
        call.arg(request.token)
            .arg(millis(request.ttl))
            .arg(if request.wake { "1" } else { "0" })
            .arg(WAITERS_MARGIN_MS)
            .arg(if request.fenced { "1" } else { "0" });
        let (acquired, detail): (i64, i64) =
            self.invoke("acquire", request.key, script, &call).await?;
        Ok(if acquired == 1 {
            Attempt::Acquired {
                fence: request.fenced.then_some(detail.max(0).unsigned_abs()),
            }
        } else {
            Attempt::Held {
                remaining: Some(Duration::from_millis(detail.max(0).unsigned_abs())),
                wakeup: interest.map(Wakeup::new),
            }
        })
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Host and port only: connection URLs may carry passwords.
        let mode = match self.shared.connection {
            Connection::Single(_) => "single",
            Connection::Cluster(_) => "cluster",
        };
        f.debug_struct("RedisStore")
            .field("mode", &mode)
            .field("nodes", &self.shared.nodes)
            .field("channel", &self.shared.config.channel)
            .field("timeout", &self.shared.config.timeout)
            .field("waited_keys", &self.shared.waiters.len())
            .finish()
    }
}

/// The local side of the one subscription: which keys this process's waiters
/// are waiting for, by Redis lease key (`{lock:name}`), which is what release
/// messages carry.
///
/// Each entry's `Notify` is shared by the waiters of that key; the map holds
/// one reference and each waiter's [`Interest`] another, so an entry with a
/// single reference has no waiter left and is removed.
#[derive(Default)]
struct Waiters {
    keys: Mutex<HashMap<Box<str>, Arc<Notify>>>,
}

impl Waiters {
    fn lock(&self) -> MutexGuard<'_, HashMap<Box<str>, Arc<Notify>>> {
        // Nothing in this module panics while holding the lock, and the map
        // stays consistent at every step; a poisoned lock is still usable.
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn len(&self) -> usize {
        self.lock().len()
    }

    /// Registers a waiter for the next release of `key`, enabled at once so a
    /// notification sent from now on is not lost.
    fn register(self: &Arc<Self>, key: &str) -> Interest {
        let notify = {
            let mut keys = self.lock();
            match keys.get(key) {
                Some(notify) => Arc::clone(notify),
                None => {
                    let notify = Arc::new(Notify::new());
                    keys.insert(key.into(), Arc::clone(&notify));
                    notify
                }
            }
        };
        let mut notified = Box::pin(notify.notified_owned());
        notified.as_mut().enable();
        Interest {
            waiters: Arc::clone(self),
            key: key.into(),
            notified,
        }
    }

    /// A release of `key` was announced: wake one local waiter. It retries;
    /// if it fails again it waits again, and the others keep waiting for the
    /// next release.
    fn released(&self, key: &str) {
        if let Some(notify) = self.lock().get(key) {
            notify.notify_one();
        }
    }

    /// Wakes every waiter: used after the subscription (re)connects, when a
    /// release may have gone unheard.
    fn wake_all(&self) {
        for notify in self.lock().values() {
            notify.notify_waiters();
        }
    }
}

/// One waiter's registration; the future inside the [`Wakeup`] it becomes.
struct Interest {
    waiters: Arc<Waiters>,
    key: Box<str>,
    notified: Pin<Box<OwnedNotified>>,
}

impl Future for Interest {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.notified.as_mut().poll(cx)
    }
}

impl Drop for Interest {
    fn drop(&mut self) {
        let mut keys = self.waiters.lock();
        // Two references left: the map's and our `notified`'s. Every clone is
        // made under this lock, so the count cannot grow while we check.
        if keys
            .get(&*self.key)
            .is_some_and(|notify| Arc::strong_count(notify) <= 2)
        {
            keys.remove(&*self.key);
        }
    }
}

/// The background task holding the store's one subscription.
struct Listener {
    subscribers: Vec<Client>,
    channel: String,
    timeout: Duration,
    waiters: Arc<Waiters>,
}

type Subscription = (PubSubSink, PubSubStream);

impl Listener {
    /// Subscribes through the first node that answers, starting at `start`.
    async fn subscribe_any(
        &self,
        start: usize,
    ) -> std::result::Result<(usize, Subscription), Failure> {
        let mut last = Failure::TimedOut(self.timeout);
        for offset in 0..self.subscribers.len() {
            let index = (start + offset) % self.subscribers.len();
            match self.subscribe(&self.subscribers[index]).await {
                Ok(subscription) => return Ok((index, subscription)),
                Err(error) => last = error,
            }
        }
        Err(last)
    }

    async fn subscribe(&self, client: &Client) -> std::result::Result<Subscription, Failure> {
        bounded(self.timeout, async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&self.channel).await?;
            Ok::<_, RedisError>(pubsub.split())
        })
        .await
    }

    /// Serves the subscription until it fails, then re-subscribes (through the
    /// next node, on a cluster), for the store's life.
    ///
    /// Every attempt waits its turn in a growing [`Backoff`], whether the
    /// last one failed or "succeeded" and was dropped at once: a server that
    /// accepts subscriptions and closes them gets one attempt per pause, not
    /// hundreds a second, and the waiters (woken after each resubscription,
    /// in case a release went unheard) are woken at most once per pause.
    async fn run(self, mut index: usize, first: Subscription) {
        let mut subscription = Some(first);
        let mut backoff = Backoff::new(RESUBSCRIBE_MIN, RESUBSCRIBE_MAX, SUBSCRIPTION_HEALTHY);
        loop {
            if let Some((sink, stream)) = subscription.take() {
                let up = tokio::time::Instant::now();
                self.serve(sink, stream).await;
                backoff.ended_after(up.elapsed());
                tracing::debug!(channel = %self.channel, "release subscription lost; resubscribing");
                index += 1;
            }
            tokio::time::sleep(backoff.next_pause()).await;
            match self.subscribe_any(index).await {
                Ok((at, fresh)) => {
                    index = at;
                    // Releases while we were away went unheard: let every
                    // waiter retry once.
                    self.waiters.wake_all();
                    subscription = Some(fresh);
                }
                Err(error) => {
                    tracing::debug!(%error, "could not resubscribe to releases yet");
                }
            }
        }
    }

    /// Dispatches messages until the connection ends or stops answering.
    async fn serve(&self, mut sink: PubSubSink, mut stream: PubSubStream) {
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ping.tick().await;
        loop {
            tokio::select! {
                message = stream.next() => {
                    let Some(message) = message else { return };
                    if let Ok(key) = std::str::from_utf8(message.get_payload_bytes()) {
                        self.waiters.released(key);
                    }
                }
                _ = ping.tick() => {
                    if bounded(self.timeout, sink.ping::<Value>()).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slot Redis Cluster computes for a key, following its hash tag rule.
    fn slot(key: &str) -> u16 {
        let bytes = key.as_bytes();
        let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
            let close = bytes[open + 1..].iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &bytes[open + 1..open + 1 + close])
        });
        crc16(tagged.unwrap_or(bytes)) % 16384
    }

    /// CRC16/XMODEM, the checksum Redis Cluster uses for slots.
    fn crc16(bytes: &[u8]) -> u16 {
        let mut crc: u16 = 0;
        for &byte in bytes {
            crc ^= u16::from(byte) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x1021
                } else {
                    crc << 1
                };
            }
        }
        crc
    }

    #[test]
    fn the_slot_function_matches_the_redis_cluster_reference_values() {
        // Values from the cluster specification; they prove the helper the
        // next tests rely on computes slots the way Redis does.
        assert_eq!(crc16(b"123456789"), 0x31C3, "CRC16 reference value");
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(
            slot("foo{}{bar}"),
            crc16(b"foo{}{bar}") % 16384,
            "empty tag hashes the whole key"
        );
    }

    #[test]
    fn a_lease_and_its_waiters_marker_share_a_slot_whatever_braces_the_name_holds() {
        // Both keys are touched by one script; in different slots a cluster
        // refuses the script with CROSSSLOT.
        for key in [
            "lock:plain",
            "lock:{tenant}:report",
            "lock:}{",
            "lock:}",
            "lock:{",
            "{}",
            "}}}}",
            "lock:%7D",
            "lock:with space\nand newline ünïcödé",
        ] {
            let lease = lease_key(key).expect("non-empty key");
            assert_eq!(
                slot(&lease),
                slot(&waiters_key(&lease)),
                "lease {lease:?} and its marker must share a slot"
            );
            assert_eq!(
                slot(&lease),
                crc16(&lease.as_bytes()[1..lease.len() - 1]) % 16384,
                "the tag of {lease:?} must be the whole escaped name"
            );
        }
    }

    #[test]
    fn braces_and_percent_signs_are_escaped_and_nothing_else() {
        // The escaping is what keeps a name's hash tag whole; a wrong escape
        // would either split the tag (CROSSSLOT) or merge two names.
        let cases = [
            ("lock:a", "{lock:a}"),
            ("lock:a}b%c", "{lock:a%7Db%25c}"),
            ("}}%%", "{%7D%7D%25%25}"),
            ("lock:{tenant}", "{lock:{tenant%7D}"),
            ("lock:\u{e9}t\u{e9} }", "{lock:\u{e9}t\u{e9} %7D}"),
        ];
        for (key, expected) in cases {
            assert_eq!(
                lease_key(key).expect("non-empty"),
                expected,
                "escaping {key:?}"
            );
        }
    }

    #[test]
    fn distinct_names_never_share_a_lease_key() {
        // Escaping must be injective, or two locks would be one.
        let names = ["a}", "a%7D", "a%257D", "a%", "a%25", "a"];
        let keys: std::collections::HashSet<String> = names
            .iter()
            .map(|n| lease_key(n).expect("non-empty"))
            .collect();
        assert_eq!(
            keys.len(),
            names.len(),
            "every name needs its own key: {keys:?}"
        );
    }

    #[test]
    fn different_names_spread_across_slots() {
        // One hot slot would put every lock on one cluster node.
        let slots: std::collections::HashSet<u16> = (0..200)
            .map(|i| slot(&lease_key(&format!("lock:job-{i}")).expect("non-empty")))
            .collect();
        assert!(
            slots.len() > 150,
            "200 names landed in only {} slots",
            slots.len()
        );
    }

    #[test]
    fn an_empty_key_is_an_error_not_a_whole_key_hash() {
        // `{}` would make Redis hash the whole key, splitting lease and marker.
        assert!(matches!(lease_key(""), Err(Error::InvalidName { .. })));
    }

    #[test]
    fn a_url_shown_in_an_error_never_carries_its_password() {
        let shown = redacted("redis://admin:hunter2@cache.internal:6379/0");
        assert!(!shown.contains("hunter2"), "password leaked: {shown}");
        assert!(
            shown.contains("cache.internal:6379"),
            "host missing: {shown}"
        );
        assert_eq!(redacted("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }

    #[test]
    fn a_waiter_that_leaves_takes_its_key_out_of_the_map() {
        // Without this, every key ever waited on would stay in memory.
        let waiters = Arc::new(Waiters::default());
        let first = waiters.register("k");
        let second = waiters.register("k");
        assert_eq!(waiters.len(), 1, "one entry per key");
        drop(first);
        assert_eq!(waiters.len(), 1, "the second waiter keeps the entry");
        drop(second);
        assert_eq!(waiters.len(), 0, "the last waiter removes it");
    }

    #[tokio::test]
    async fn a_release_announced_before_the_waiter_sleeps_still_wakes_it() {
        // Interest is registered before the acquire script runs; a release
        // heard between the script's answer and the sleep must not be lost.
        let waiters = Arc::new(Waiters::default());
        let interest = waiters.register("k");
        waiters.released("k");
        tokio::time::timeout(Duration::from_secs(10), interest)
            .await
            .expect("an early notification must still wake the waiter");
    }
}
