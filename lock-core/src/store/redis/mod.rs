//! Leases in Redis or Redis Cluster: visible to every process that can reach
//! the server.
//!
//! One job per file: [`config`] (the settings), [`connect`] (URLs,
//! connections, start-up), [`shared`] (what a store's clones share, the
//! command connection first), [`operations`] (what each lease operation
//! sends and what its reply means), [`calls`] (sending one script call,
//! and a write that waits for replicas), [`acked`] (the connections such
//! writes use), [`keys`] (where a lease lives, and cluster slots),
//! [`listing`] (walking the keyspace for operators), [`scripts`] (the Lua
//! behind each operation, in `lua/`), [`wakeups`] (the one release
//! subscription) and [`sharded`] (the same through sharded pub/sub on a
//! cluster), [`sentinel`] (the primary behind Sentinel), [`url`] (what
//! [`connect`](crate::connect()) makes of a Redis URL); this file is the
//! store itself: its docs, its constructors and its [`LockStore`] impl.
//! The per-call deadline, the waiter registry, the reconnect backoff, the
//! listener's lifetime, the key check and the longest TTL are shared with the
//! other networked stores, in [`store::kit`](crate::store), the toolkit any
//! store can use; apart from it, the folder uses only lock-core's public
//! API, as a store in another crate would.

mod acked;
mod calls;
mod config;
mod connect;
mod discovery;
pub(crate) mod keys;
mod listing;
pub(crate) mod operations;
mod scripts;
mod sentinel;
mod sharded;
mod shared;
pub(crate) mod url;
mod wakeups;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ::redis::Client;
use ::redis::cluster::ClusterClient;

pub use self::config::RedisConfig;
use self::shared::{Connection, Shared};
use crate::store::kit::{self, MAX_TTL};
use crate::store::{AcquireRequest, Attempt, BoxFuture, LockStore, Wakeup};
use crate::{Holder, Result};

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
/// (`EVALSHA`), or, for an acquire that is not fenced, the native `SET NX
/// PX` alone (a script call costs the server several times a native `SET`,
/// and the server's CPU is what bounds throughput when many tasks share one
/// Redis). The one exception is a waiting acquire that finds the lock held:
/// its `SET` is followed by the acquire script, which marks the key as
/// waited for. A server that does not know a script (it
/// restarted, or its script cache was flushed) answers `NOSCRIPT`; the script
/// is then loaded and the call retried once, transparently. The scripts are
/// loaded when the store connects, so in the steady state every operation
/// costs exactly one round trip, that exception aside:
///
/// | operation | script |
/// |---|---|
/// | acquire | the native `SET key token NX PX ttl`, no script |
/// | acquire, waiting, after that `SET` failed; or fenced | one script: `SET key token NX PX ttl`; if that fails, `PTTL key` and mark the key as waited for; for a fenced lock, the next [fencing token](#fencing-tokens) from its counter and `TIME` |
/// | release | `GET key == token` then `DEL key` and, if anyone waits, `PUBLISH` on the key's channel |
/// | extend | `GET key == token` then `PEXPIRE key ttl` |
/// | a waiting writer giving up, with a claim on the readers' turn (see [Readers](#readers)) | `ZREM` of its claim and, if that frees the readers' turn, `PUBLISH` on the key's channel |
///
/// With [`RedisConfig::replica_acks`], each acquire and extend is followed
/// by `WAIT` in the same pipeline: still one round trip, whose answer
/// waits for the replicas. That pipeline goes out on a connection of its
/// own, from a small pool, since a `WAIT` holds up everything queued behind
/// it on its connection: other calls never wait for it.
///
/// # Keys and cluster slots
///
/// A lease for the store key `lock:reports:acme` lives in the Redis key
/// `{lock:reports:acme}`, and the marker "somebody waits for it" in
/// `{lock:reports:acme}:waiters`; a fenced lock's counter (the last token
/// handed out) lives in `{lock:reports:acme}:fence`, which never expires
/// (one small key per fenced name), and the holder it last went to in
/// `{lock:reports:acme}:fenced` (so the holder read gives a fenced holder
/// its own token and nobody else's; it never expires either); an
/// election's leader is named in `{lock:reports:acme}:elected` (its
/// releases are announced to observers; one per election). The readers and
/// the waiting writers' claims are `:readers` and `:writer-waits`. Every
/// script is sent every key it touches. The braces make the whole store key
/// the [hash tag], so all the keys of one script are always in one cluster
/// slot (no `CROSSSLOT`), while different lock names spread across slots. A `}`
/// inside a name would end the tag early, so `%` and `}` in the store key are
/// written as `%25` and `%7D`: the tag is always exactly the (escaped) name,
/// whatever characters it contains.
///
/// [hash tag]: https://redis.io/docs/latest/operate/oss_and_stack/reference/cluster-spec/#hash-tags
///
/// # Readers
///
/// The read side of a name ([`Lock::read`](crate::Lock::read)) lives beside
/// its lease, in the same slot: while readers hold the name, the lease key
/// holds a marker instead of a token, ending with the last reader's lease,
/// so a writer's plain `SET NX` fails as it would on any holder;
/// `{...}:readers` is a sorted set of the readers' tokens, each scored with
/// when its own lease ends on the server's clock. One script joins a
/// reader (unless a writer holds the name or waits for it), and release,
/// extend and the holder read each handle a writer's token and a reader's
/// in one script. A writer that waits while readers hold the name claims
/// their turn in `{...}:writer-waits` (a sorted set of claims, each ending
/// 2 s after it was made) and renews it on each attempt, which it makes at
/// least every second meanwhile: new readers wait behind it. A writer's own
/// claim goes when it gets the name or releases it, and when it stops
/// waiting without the name (its wait ran out, or its acquire failed or
/// was dropped): it takes the claim back, wakes the readers of its process
/// it stood in front of, and, with no other claim left, announces it on
/// the name's channel, as a release, to the readers elsewhere. A writer
/// whose process died holds readers off 2 s at most. Other writers'
/// claims stand. The last reader to go frees the name and wakes the
/// waiters as a release does.
///
/// # Fencing tokens
///
/// A fenced acquire takes its token in the same script as its `SET`: one
/// more than the name's counter, or the server's clock in microseconds
/// (`TIME`) when that is higher, and stores it back as the counter. Tokens
/// therefore look like `1796571532858178` (microseconds since 1970), not
/// 1, 2, 3; only their order means anything (a resource that stores them
/// needs a 64-bit column). A script that reads `TIME` and then writes must
/// be replicated by its effects rather than run again on replicas: the
/// script asks for that (`redis.replicate_commands()`, Redis 3.2 and
/// later; the only mode since Redis 7). A counter that is not a whole
/// count below 2^53 (past which a Lua number stops counting exactly) fails
/// the acquire, before it takes the lease, with an error that says to
/// delete or lower it.
///
/// The clock is there because the counter is only as durable as Redis. A
/// restart without persistence forgets it, and a replica promoted before
/// it received the last writes holds an older count; counting from there
/// would hand new holders tokens below ones already handed out, and a
/// resource that keeps the highest token it has seen would refuse every
/// new holder until the count caught up:
///
/// ```text
///                 tokens handed out                   | counter lost | next token
/// counter only:   41, 42                              | restart      | 1, refused (below 42)
/// with the clock: 1796571532858178, 1796571532859002  | restart      | 1796571541207349
/// ```
///
/// The guarantee, stated honestly: while the counter lives, each token is
/// above the last whatever the clock does (a clock behind the counter
/// changes nothing: counting goes on from the counter). Once the counter is
/// lost, the next tokens come from the server's clock, and exceed every
/// earlier token as long as that clock (after a failover, the new
/// primary's) is not behind the one that issued them by more than the
/// outage lasted. The order is the clocks' order: an old primary cut off
/// from the others but still answering a client goes on issuing tokens
/// from its own clock, which may exceed the new primary's. A clock set back further hands out lower tokens until it
/// catches up, as the counter alone did. A name fenced by an earlier
/// release of lock-core, whose tokens counted from 1, jumps to the clock at
/// its next acquire: still upwards.
///
/// # Waking waiters without polling
///
/// Each store keeps ONE pub/sub connection, and on it subscribes to the
/// release channel of each lock this process waits for, and only those:
/// `<lease key>:<channel>` ([`RedisConfig::channel`] is the suffix, by
/// default `lock-core:released`), subscribed when the process's first
/// waiter for that lock arrives and unsubscribed when its last one leaves.
/// A release is published on its lock's channel only, so it reaches the
/// processes waiting for that lock and no others: a fleet of idle
/// processes costs the server nothing per release.
///
/// ```text
/// waiter                         store (this process)              Redis
/// SET NX PX                 -------------------------------->  held: no
/// register interest in key  -->  first waiter: SUBSCRIBE channel of key
/// acquire script            -------------------------------->  held: PTTL, mark key as waited for
///                                                         <--  { held, 1830 ms }
/// sleep: release | ttl | deadline
///                                subscription confirmed: wake waiters of key once
/// acquire script (again)    -------------------------------->  still held: sleep
///                                                     holder:  release script: DEL, PUBLISH on key's channel
///                                subscription receives key <--
/// wake one local waiter     <--  Notify
/// SET NX PX                 -------------------------------->  ours
/// ```
///
/// Interest is registered *before* the acquire script is sent, so a release
/// that races with the attempt still wakes the waiter once the subscription
/// is up (a release before the script makes the script's own `SET`
/// succeed); and since a release may land before the server confirms the
/// subscription, the waiters of a key retry once when it is confirmed. The
/// uncontended path sends nothing to pub/sub, waiting or not: an acquire
/// whose first `SET` succeeds never registers interest, and a release only
/// publishes when the key is marked as waited for.
///
/// On a cluster of Redis 7 or later, notifications use sharded pub/sub: the
/// channel starts with the lease key, so it is in the lease's slot; the
/// release script's `SPUBLISH` stays on the shard that owns the key, and the
/// store's `SSUBSCRIBE` goes to that shard (on a connection of its own that
/// follows the slot map). When a slot moves, its old owner drops the
/// subscriptions of its channels; the store subscribes again through the
/// new owner and wakes that lock's waiters once. A cluster without sharded
/// pub/sub (before Redis 7, or refusing RESP3) gets plain `PUBLISH`, which
/// every node forwards to every other, with the subscriptions on one node;
/// the store logs which at INFO when it connects, and `Debug` shows it
/// (`publish: "SPUBLISH"` or `"PUBLISH"`).
///
/// # Faults
///
/// Every call is bounded by [`RedisConfig::timeout`] (3 s by default): with
/// Redis down, calls return [`Error::Store`](crate::Error::Store) within that time, never hang and
/// never panic. The connections reconnect on their own in the background, so
/// the same store works again once Redis is back. While the subscription is
/// down, waiters still wake when the holder's TTL runs out or at their
/// deadline; after it comes back, every local waiter retries once, in case a
/// release was missed.
///
/// # Redis with replicas
///
/// Behind Sentinel, connect with the sentinels and the service name:
/// `redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/mymaster` (see
/// [`connect`](RedisStore::connect)). The store asks the sentinels for the
/// primary and keeps one connection to it. A call that finds the connection
/// broken, or the node demoted (`READONLY`), or that is cut off at its time
/// bound, fails with [`Error::Store`](crate::Error::Store) like any store
/// error, and the next call asks the sentinels again: after a failover the
/// store is on the new primary as soon as the sentinels name it, and while
/// there is none, every call fails within [`RedisConfig::timeout`]. The
/// release subscription follows the same way: it is opened again on the
/// new primary, and every waiter of this process retries once, so no waiter
/// sleeps out its holder's TTL because of a failover. When the subscription
/// finds the sentinels naming a new primary, the command connection is
/// dropped at the same moment, so those retries go to the new primary
/// rather than fail on the old connection. A failed call is not
/// retried by the store (an acquire may have applied): the caller's retry,
/// or the next waiting round, is.
///
/// Redis replicates asynchronously: a primary that dies right after
/// granting a lease may be replaced by a replica that never saw it, and the
/// next caller is granted the same name while the first holder still works.
/// [`RedisConfig::replica_acks`] closes that window for the failures it
/// covers: every lease write is followed by `WAIT`, and a lease is granted
/// only once that many replicas have it. What it does not do, stated
/// plainly: `WAIT` does not make Redis consistent (a replica that
/// acknowledged can lose the write in a later failure, and Sentinel may
/// promote a replica that did not acknowledge when several are behind), and
/// it does nothing for a holder that is paused past its TTL. For systems
/// that must reject a stale holder, use [fencing tokens](crate::Lock::fenced)
/// checked by the resource itself; for leases that survive any single
/// failure, the etcd store.
///
/// What the failover tests measured: in 30 rounds where the replica was
/// behind when a lease was granted and the primary was then killed, the
/// promotion lost all 30 leases without acks (the next holder was granted
/// the name, though with a higher fencing token: the promoted replica's
/// counter was behind, its clock was not) and none with
/// `replica_acks(1, ...)`. One task's uncontended pairs ran at 0.95x to
/// 1.0x the same commands sent by hand. The repository's
/// `docs/reliability.md` and `docs/performance.md` give both runs, with
/// their commands and dates.
///
/// # What Redis adds to [the guarantee](crate#the-guarantee-stated-honestly)
///
/// Exclusion holds for every process that uses the same Redis (or cluster)
/// and key prefix: acquire is one atomic `SET NX PX`, release and extend
/// compare the owner token in one script, and TTLs run on the server's clock.
/// It is exactly as durable as Redis: with asynchronous replication, a
/// primary that fails over before replicating a fresh lease can let a second
/// holder in (unless [`RedisConfig::replica_acks`] waits for replicas, see
/// above); Redis persistence settings decide what a restart forgets.
#[derive(Clone)]
pub struct RedisStore {
    shared: Arc<Shared>,
}

impl RedisStore {
    /// Connects to one Redis server, or to the primary of a service behind
    /// Sentinel, with the default [`RedisConfig`].
    ///
    /// `url` is `redis://[user:password@]host[:port][/db]`, `rediss://` for
    /// TLS (with lock-core's `redis-tls` feature), or `redis+unix:///path`.
    ///
    /// Behind Sentinel it is
    /// `redis+sentinel://[user:password@]sentinel[:port][,sentinel[:port]...]/service`,
    /// with `?db=N`, `sentinel_username=` and `sentinel_password=` in the
    /// query when needed: the sentinels (port 26379 unless given) are asked
    /// for the primary of `service`; `user:password` is for the data nodes,
    /// the `sentinel_` settings for the sentinels themselves. Escape
    /// reserved characters in a password as `%XX` (`@` is `%40`).
    /// `rediss+sentinel://` speaks TLS to the sentinels and the data nodes
    /// (with the `redis-tls` feature). See [Redis with
    /// replicas](RedisStore#redis-with-replicas).
    ///
    /// The URL is read as every store URL is
    /// ([`StoreUrl`](crate::store::kit::StoreUrl)): a password may hold
    /// any character but `/` unescaped.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidUrl`](crate::Error::InvalidUrl) when the URL
    ///   cannot be read or is invalid for Redis;
    /// - [`Error::InvalidConfig`](crate::Error::InvalidConfig) when a
    ///   certificate file is missing or holds no certificate, or
    ///   certificates are given where the store cannot use them;
    /// - [`Error::Store`](crate::Error::Store) when the server cannot be
    ///   reached, or does not answer, within the timeout; behind Sentinel,
    ///   also when no sentinel answers or none knows the service.
    pub async fn connect(url: &str) -> Result<RedisStore> {
        Self::connect_with(url, RedisConfig::default()).await
    }

    /// Connects to one Redis server, with `config`.
    ///
    /// # Errors
    ///
    /// As [`connect`](RedisStore::connect).
    pub async fn connect_with(url: &str, config: RedisConfig) -> Result<RedisStore> {
        let (again, settings) = (url.to_owned(), config.clone());
        let shared = Self::open(url, config).await?;
        Ok(Self::reopening(shared, move || {
            let (url, config) = (again.clone(), settings.clone());
            async move { Self::open(&url, config).await }
        }))
    }

    /// The store a URL names, one server or a service behind Sentinel.
    async fn open(url: &str, config: RedisConfig) -> Result<Shared> {
        if sentinel::is_sentinel_url(url) {
            connect::no_certificates(url, &config.tls, "Redis behind Sentinel")?;
            return connect::sentinel(url, config).await;
        }
        let client = connect::open_client(url, &config.tls)?;
        connect::single(client, config).await
    }

    /// A store over `shared` that opens itself again with `open`
    /// ([`LockStore::reopen`]).
    fn reopening<F, Fut>(mut shared: Shared, open: F) -> RedisStore
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Shared>> + Send + 'static,
    {
        shared.reopen = Some(kit::Reopen::new(move || {
            let opening = open();
            async move {
                Ok(RedisStore {
                    shared: Arc::new(opening.await?),
                })
            }
        }));
        RedisStore {
            shared: Arc::new(shared),
        }
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
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) when `urls`
    /// is empty or names certificates; [`Error::InvalidUrl`](crate::Error::InvalidUrl)
    /// when a URL is invalid; [`Error::Store`](crate::Error::Store) when no
    /// seed answers within the timeout.
    pub async fn cluster(urls: &[&str]) -> Result<RedisStore> {
        Self::cluster_with(urls, RedisConfig::default()).await
    }

    /// Connects to a Redis Cluster through any of its nodes, with `config`.
    ///
    /// # Errors
    ///
    /// As [`cluster`](RedisStore::cluster).
    pub async fn cluster_with(urls: &[&str], config: RedisConfig) -> Result<RedisStore> {
        let (client, subscribers) = connect::cluster_clients(urls, &config)?;
        Self::over_cluster(client, subscribers, config).await
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
    /// [`Error::Store`](crate::Error::Store) when the server cannot be
    /// reached within the timeout, or `config` names certificates
    /// ([`RedisConfig::tls`]): the client's own are what it uses, so give
    /// them to it (`redis::Client::build_with_tls`).
    pub async fn from_client(client: Client, config: RedisConfig) -> Result<RedisStore> {
        connect::no_certificates_given(&config, "a redis::Client of the application's own")?;
        let (again, settings) = (client.clone(), config.clone());
        let shared = connect::single(client, config).await?;
        Ok(Self::reopening(shared, move || {
            connect::single(again.clone(), settings.clone())
        }))
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
    /// [`Error::Store`](crate::Error::Store) when `subscribers` is empty, or
    /// the cluster or every subscriber node cannot be reached within the
    /// timeout.
    pub async fn from_cluster_client(
        client: ClusterClient,
        subscribers: Vec<Client>,
        config: RedisConfig,
    ) -> Result<RedisStore> {
        connect::no_certificates_given(&config, "a cluster client of the application's own")?;
        Self::over_cluster(client, subscribers, config).await
    }

    /// A store over a cluster client, that opens itself again over it.
    async fn over_cluster(
        client: ClusterClient,
        subscribers: Vec<Client>,
        config: RedisConfig,
    ) -> Result<RedisStore> {
        let again = (client.clone(), subscribers.clone(), config.clone());
        let shared = connect::cluster(client, subscribers, config).await?;
        Ok(Self::reopening(shared, move || {
            let (client, subscribers, config) = again.clone();
            connect::cluster(client, subscribers, config)
        }))
    }

    /// The configuration the store runs with.
    pub fn config(&self) -> &RedisConfig {
        &self.shared.config
    }
}

impl LockStore for RedisStore {
    fn acquire<'a>(&'a self, request: AcquireRequest<'a>) -> BoxFuture<'a, Result<Attempt>> {
        Box::pin(async move {
            kit::check_lease(request.key, request.ttl, self)?;
            self.shared.acquire(request).await
        })
    }

    fn release<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.shared.release(key, token))
    }

    fn extend<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            kit::check_lease(key, ttl, self)?;
            self.shared.extend(key, token, ttl).await
        })
    }

    fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.shared.force_release(key))
    }

    fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Holder>>> {
        Box::pin(self.shared.holder(key))
    }

    /// The holder script: the name's lease key and its readers, no `SCAN`.
    fn is_held_by<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let holders = self.shared.holders(key).await?;
            Ok(holders.iter().any(|holder| holder.token() == token))
        })
    }

    /// `SCAN` in batches (on every primary of a cluster), then one holder
    /// read per lease found; see [`LockManager::list`](crate::LockManager::list)
    /// for what that costs and promises.
    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<(String, Holder)>>> {
        Box::pin(self.shared.list_leases(prefix))
    }

    fn name(&self) -> &'static str {
        "redis"
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

    fn read_mode(&self) -> bool {
        true
    }

    /// On the lease's release channel, which every release of a fenced
    /// name and every new holder of one is published on.
    fn observe(&self, key: &str) -> Option<Wakeup> {
        let lease = keys::lease_key(key).ok()?;
        Some(Wakeup::observer(self.shared.waiters.observe(&lease)))
    }

    fn reopen(&self) -> Option<BoxFuture<'static, Result<Arc<dyn LockStore>>>> {
        self.shared.reopen.as_ref().map(kit::Reopen::open)
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Host and port only: connection URLs may carry passwords.
        let mode = match self.shared.connection {
            Connection::Single(_) => "single",
            Connection::Cluster(_) => "cluster",
            Connection::Sentinel(_) => "sentinel",
        };
        f.debug_struct("RedisStore")
            .field("mode", &mode)
            .field("nodes", &self.shared.nodes)
            .field("channel", &self.shared.config.channel)
            .field("publish", &self.shared.publish)
            .field("timeout", &self.shared.config.timeout)
            .field("waited_keys", &self.shared.waiters.len())
            .finish()
    }
}
