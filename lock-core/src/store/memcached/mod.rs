//! Leases in memcached, over its meta protocol (memcached 1.6.13 and later).
//!
//! One job per file: [`config`] (the settings), [`target`] (the server a
//! URL names, and its TLS settings), [`client`] (a minimal meta-protocol
//! client: its connections, each served by a task; why not a crate is said
//! there), [`dial`] (opening a connection: TCP, or TLS over it),
//! [`protocol`] (the meta protocol's commands and replies on the wire),
//! [`failure`] (why a request failed), [`keys`] (key encoding and
//! whole-second TTLs); this file is the store.

pub(crate) mod client;
mod config;
mod dial;
pub(crate) mod failure;
mod keys;
pub(crate) mod protocol;
mod target;
pub(crate) mod url;

use std::fmt;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::sync::Arc;
use std::time::Duration;

use self::client::{Answer, Connection, Session};
pub use self::config::MemcachedConfig;
use self::dial::Dialer;
use self::failure::Failure;
use self::keys::{MAX_TTL, exptime, lease_key};
use self::protocol::{Code, Command, Reply};
use self::target::target;
use crate::store::kit::{self, CallError, Deadline, Interest, Waiters};
use crate::store::{AcquireRequest, Attempt, BoxFuture, LockStore};
use crate::{Error, Holder, Result};

/// Leases kept in memcached, shared by every process that reaches the
/// server.
///
/// ```no_run
/// # #[tokio::main] async fn main() -> lock_core::Result<()> {
/// use std::time::Duration;
/// use lock_core::{LockManager, MemcachedStore};
///
/// let store = MemcachedStore::connect("memcache://127.0.0.1:11211").await?;
/// let locks = LockManager::new(store);
/// let ran = locks
///     .lock("nightly-export", Duration::from_secs(600))
///     .run(async { Ok::<_, lock_core::Error>("exported") })
///     .await?;
/// # let _ = ran;
/// # Ok(()) }
/// ```
///
/// One server: memcached does not replicate, and spreading one lock's
/// requests over several servers would give each server its own copy of the
/// lock. A store runs on the tokio runtime it was created in (its connection
/// tasks live there). Every call is bounded by [`MemcachedConfig::timeout`]
/// (3 s by default), and each lock name always goes over the same one of
/// the store's connections, so its requests reach the server in order.
/// Credentials in the URL are refused (the meta protocol has no
/// authentication: keep memcached on a private network); `Debug` shows the
/// host and port only. Any lock name works (spaces, newlines, unicode, a
/// kilobyte of text): keys travel in the meta protocol's binary form, as
/// themselves up to 180 bytes and as their SHA-256 beyond.
///
/// # TLS
///
/// With lock-core's `memcached-tls` feature, a `memcaches://host[:port]`
/// URL connects with TLS (memcached 1.6 started with `-Z`), over rustls.
/// The server's certificate is checked in full: it must chain to a CA the
/// store trusts and name the URL's host or IP address. The CA and, for a
/// server that asks for one (`-o ssl_verify_mode=2`), the client
/// certificate come from the URL,
/// `memcaches://cache:11211?sslrootcert=/etc/ca.pem&sslcert=/etc/client.pem&sslkey=/etc/client.key`,
/// or from [`MemcachedConfig::tls`]; without a CA, a public CA must have
/// signed the server's certificate. A CA that did not sign it, or a
/// client certificate the server wants and did not get, fails
/// [`connect`](MemcachedStore::connect) with a message that says which.
///
/// # The operations
///
/// | operation | meta commands | round trips |
/// |---|---|---|
/// | acquire | `ms key T<s> ME` (add: set if absent, with the TTL); a waiting caller pipelines `mg key t` behind it for the holder's remaining TTL | 1 |
/// | release | `mg key v c` (value and CAS), then, if the value is our token, `md key C<cas>` | 2 |
/// | extend | `mg key v c`, then, if ours, `ms key T<s> C<cas>` (same token, new TTL) | 2 |
/// | holder | `mg key v t` | 1 |
///
/// Release and extend read, then write under the CAS they read: if anything
/// changed the item in between (it expired and someone else took it), the
/// CAS no longer matches and nothing is changed. There is no window in which
/// a stale holder can delete or prolong the next holder's lease.
///
/// # TTLs in whole seconds
///
/// Memcached keeps TTLs in whole seconds on a clock that ticks once a
/// second, so an item stored for `n` seconds can expire after as little as
/// `n - 1`. The store asks for the TTL rounded up to whole seconds, plus
/// one: a lease lasts at least its TTL and at most about a second and a
/// half more (a 1500 ms lease lasts between 2 and 3 s). TTLs above 30 days
/// less a second are refused ([`max_ttl`](LockStore::max_ttl)): memcached
/// would read them as a date. [`Holder::remaining_ttl`] is in whole seconds.
///
/// # Waiting
///
/// Memcached cannot tell anyone about a release. A waiter is woken at once
/// by a release (or force-release) made through this store, in this
/// process; otherwise it sleeps for the holder's remaining TTL, with jitter,
/// and tries again. Never a fixed polling period.
///
/// # What memcached adds to [the guarantee](crate#the-guarantee-stated-honestly)
///
/// Memcached is a cache: under memory pressure it **evicts** items, a lease
/// among them, and an evicted lease is a lock nobody holds. A restart
/// forgets every lease. Fencing tokens are not offered
/// ([`fencing`](LockStore::fencing) is false, and `fenced` locks fail with
/// [`Error::FencingUnsupported`]): a counter in memcached could be evicted
/// too and start again below tokens already handed out. Use this store where
/// memcached is already the shared state and a rare double run is
/// tolerable; for money, or anything that must never run twice, use Redis
/// with fencing, PostgreSQL or etcd.
#[derive(Clone)]
pub struct MemcachedStore {
    shared: Arc<Shared>,
}

struct Shared {
    connections: Vec<Connection>,
    waiters: Arc<Waiters>,
    config: MemcachedConfig,
    /// `host:port`, for `Debug` and errors.
    address: String,
    /// Whether its connections are TLS (`memcaches://`).
    tls: bool,
    /// How it opens itself again ([`LockStore::reopen`]).
    reopen: Option<kit::Reopen>,
}

impl MemcachedStore {
    /// Connects to one memcached server, with the default
    /// [`MemcachedConfig`].
    ///
    /// `url` is `memcache://host[:port]` (port 11211 by default), or
    /// `memcaches://host[:port][?sslrootcert=PATH][&sslcert=PATH&sslkey=PATH]`
    /// for TLS (feature `memcached-tls`; see [TLS](MemcachedStore#tls)).
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidUrl`] when the URL is invalid (`memcaches://` in
    ///   a build without the `memcached-tls` feature names it);
    /// - [`Error::InvalidConfig`] when a certificate file is missing or
    ///   holds no certificate, or certificates are given for `memcache://`;
    /// - [`Error::Store`] when the server cannot be reached within the
    ///   timeout, or is older than memcached 1.6.13 (the first whose meta
    ///   protocol has everything the store sends), or the TLS connection
    ///   fails: its message says why (a CA that did not sign the server's
    ///   certificate, a client certificate the server wants and did not
    ///   get...).
    pub async fn connect(url: &str) -> Result<MemcachedStore> {
        Self::connect_with(url, MemcachedConfig::default()).await
    }

    /// Connects to one memcached server, with `config`.
    ///
    /// # Errors
    ///
    /// As [`connect`](MemcachedStore::connect).
    pub async fn connect_with(url: &str, config: MemcachedConfig) -> Result<MemcachedStore> {
        Self::open(url, config, true).await
    }

    /// Connects to `url`; with `reopens`, a store that can open itself
    /// again that way ([`LockStore::reopen`]).
    async fn open(url: &str, config: MemcachedConfig, reopens: bool) -> Result<MemcachedStore> {
        let reopen = reopens.then(|| reopen(url, &config));
        let target = target(url, &config.tls)?;
        let dialer =
            Dialer::new(&target).map_err(|why| Error::invalid_config("memcached", why))?;
        let connections = (0..config.pool_size)
            .map(|_| Connection::new(dialer.clone(), config.timeout))
            .collect();
        let store = MemcachedStore {
            shared: Arc::new(Shared {
                connections,
                waiters: Arc::new(Waiters::default()),
                config,
                address: target.address,
                tls: target.tls.is_some(),
                reopen,
            }),
        };
        // One request on every connection: the server is there, and its
        // version is one the store can use (the client asks at connect).
        for connection in &store.shared.connections {
            let probe = store
                .deadline()
                .bound(connection.call(vec![Command::new("mg lock-core-probe t".to_owned())], None))
                .await;
            if let Err(e) = probe {
                return Err(Error::store("connect", store.shared.address.clone(), e));
            }
        }
        Ok(store)
    }

    /// The configuration the store runs with.
    pub fn config(&self) -> &MemcachedConfig {
        &self.shared.config
    }

    fn deadline(&self) -> Deadline {
        Deadline::after(self.shared.config.timeout, "MemcachedConfig::timeout")
    }

    /// The connection for `lease`: always the same one, so one key's
    /// requests reach the server in order.
    fn connection(&self, lease: &str) -> &Connection {
        let connections = &self.shared.connections;
        let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(lease);
        &connections[(hash % connections.len() as u64) as usize]
    }

    /// Sends `commands` for the lease `lease` and reads their replies, all
    /// within one deadline; with `pin`, only on that session.
    async fn call(
        &self,
        operation: &'static str,
        key: &str,
        lease: &str,
        commands: Vec<Command>,
        pin: Option<Session>,
    ) -> Result<Answer> {
        self.call_within(self.deadline(), operation, key, lease, commands, pin)
            .await
    }

    /// [`call`](MemcachedStore::call), within `deadline` (one shared by the
    /// steps of a call that makes several).
    async fn call_within(
        &self,
        deadline: Deadline,
        operation: &'static str,
        key: &str,
        lease: &str,
        commands: Vec<Command>,
        pin: Option<Session>,
    ) -> Result<Answer> {
        deadline
            .bound(self.connection(lease).call(commands, pin))
            .await
            .map_err(|e| Error::store(operation, key, e))
    }

    /// The lease's value, CAS, and the session they were read on, when it
    /// exists. A write under that CAS must go out on the same session:
    /// memcached's CAS counter starts again when the server restarts.
    async fn value_and_cas(
        &self,
        deadline: Deadline,
        operation: &'static str,
        key: &str,
        lease: &str,
    ) -> Result<Option<(Vec<u8>, i64, Session)>> {
        let command = Command::new(format!("mg {lease} b v c"));
        let answer = self
            .call_within(deadline, operation, key, lease, vec![command], None)
            .await?;
        let session = answer.session;
        let Some(reply) = first(answer.replies) else {
            return Ok(None);
        };
        let cas = match reply.code {
            Code::Value => reply_cas(operation, key, &reply)?,
            _ => return Ok(None),
        };
        Ok(reply.value.map(|value| (value, cas, session)))
    }

    /// Reads the lease and, if `token` holds it, sends `write(cas)` under
    /// the CAS just read, on the connection it was read on: memcached's CAS
    /// counter starts again when the server restarts, so a CAS from an
    /// earlier connection may name the next holder's item. When that
    /// connection has closed in between, nothing was written and the lease
    /// is read again. The write's reply, or `None` when `token` does not
    /// hold the lease. One deadline bounds the whole call, every read and
    /// write in it.
    async fn write_if_ours(
        &self,
        operation: &'static str,
        key: &str,
        lease: &str,
        token: &str,
        write: impl Fn(i64) -> Command,
    ) -> Result<Option<Reply>> {
        let deadline = self.deadline();
        for _ in 0..REREADS {
            let Some((value, cas, session)) =
                self.value_and_cas(deadline, operation, key, lease).await?
            else {
                return Ok(None);
            };
            if value != token.as_bytes() {
                return Ok(None);
            }
            match deadline
                .bound(self.connection(lease).call(vec![write(cas)], Some(session)))
                .await
            {
                Ok(answer) => return Ok(first(answer.replies)),
                Err(CallError::Store(Failure::Reopened)) => continue,
                Err(e) => return Err(Error::store(operation, key, e)),
            }
        }
        Err(Error::store(
            operation,
            key,
            format!(
                "the memcached connection was reopened between the read and the write {REREADS} times running; nothing was written"
            ),
        ))
    }
}

/// How many times a release or extend reads the lease again when its
/// connection reopened between its read and its write.
const REREADS: usize = 3;

fn first(replies: Vec<Reply>) -> Option<Reply> {
    replies.into_iter().next()
}

fn reply_cas(operation: &'static str, key: &str, reply: &Reply) -> Result<i64> {
    match reply.number(b'c') {
        Some(0) => Err(Error::store(
            operation,
            key,
            "memcached keeps no CAS values (it runs with -C or --disable-cas), so a release or extend could not tell this lease from the next holder's; run memcached without -C",
        )),
        Some(cas) => Ok(cas),
        None => Err(Error::store(
            operation,
            key,
            "memcached sent a value without its CAS",
        )),
    }
}

/// `ms <lease> <len> b T<s> <flags>` and the token as its data.
fn set_command(lease: &str, token: &str, ttl: Duration, flags: &str) -> Command {
    Command::with_data(
        format!("ms {lease} {} b T{} {flags}", token.len(), exptime(ttl)),
        token.as_bytes().to_vec(),
    )
}

impl LockStore for MemcachedStore {
    fn acquire<'a>(&'a self, request: AcquireRequest<'a>) -> BoxFuture<'a, Result<Attempt>> {
        Box::pin(async move {
            kit::check_lease(request.key, request.ttl, self)?;
            let lease = lease_key(request.key)?;
            // Before the attempt: a release in this process that lands
            // between the attempt and the sleep must still wake us.
            let interest = request.wake.then(|| self.shared.waiters.register(&lease));
            let mut commands = vec![set_command(&lease, request.token, request.ttl, "ME")];
            if request.wake {
                // The holder's remaining TTL, in the same round trip.
                commands.push(Command::new(format!("mg {lease} b t")));
            }
            let mut replies = self
                .call("acquire", request.key, &lease, commands, None)
                .await?
                .replies
                .into_iter();
            match replies.next().map(|reply| reply.code) {
                Some(Code::Done) => Ok(Attempt::Acquired { fence: None }),
                Some(Code::NotStored) => {
                    let remaining = replies.next().map(|reply| match reply.number(b't') {
                        // The lease left in between: try again at once.
                        None => Duration::ZERO,
                        // No expiry: written by something other than this
                        // library; nap for our own TTL rather than spin.
                        Some(seconds) if seconds < 0 => request.ttl,
                        Some(seconds) => Duration::from_secs(seconds.unsigned_abs()),
                    });
                    Ok(Attempt::Held {
                        remaining,
                        wakeup: interest.map(Interest::into_wakeup),
                    })
                }
                other => Err(Error::store(
                    "acquire",
                    request.key,
                    format!("memcached answered an add with {other:?}"),
                )),
            }
        })
    }

    fn release<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let lease = lease_key(key)?;
            let reply = self
                .write_if_ours("release", key, &lease, token, |cas| {
                    Command::new(format!("md {lease} b C{cas}"))
                })
                .await?;
            let released = reply.is_some_and(|reply| reply.code == Code::Done);
            if released {
                self.shared.waiters.released(&lease);
            }
            Ok(released)
        })
    }

    fn extend<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            kit::check_lease(key, ttl, self)?;
            let lease = lease_key(key)?;
            let reply = self
                .write_if_ours("extend", key, &lease, token, |cas| {
                    set_command(&lease, token, ttl, &format!("C{cas}"))
                })
                .await?;
            Ok(reply.is_some_and(|reply| reply.code == Code::Done))
        })
    }

    fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let lease = lease_key(key)?;
            let command = Command::new(format!("md {lease} b"));
            let reply = first(
                self.call("force-release", key, &lease, vec![command], None)
                    .await?
                    .replies,
            );
            let released = reply.is_some_and(|reply| reply.code == Code::Done);
            if released {
                self.shared.waiters.released(&lease);
            }
            Ok(released)
        })
    }

    fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Holder>>> {
        Box::pin(async move {
            let lease = lease_key(key)?;
            let command = Command::new(format!("mg {lease} b v t"));
            let reply = first(
                self.call("read the holder of", key, &lease, vec![command], None)
                    .await?
                    .replies,
            );
            Ok(reply.and_then(|reply| {
                let remaining = match reply.number(b't') {
                    Some(seconds) if seconds >= 0 => Duration::from_secs(seconds.unsigned_abs()),
                    _ => Duration::MAX,
                };
                let token = reply.value?;
                Some(Holder::new(String::from_utf8_lossy(&token), remaining))
            }))
        })
    }

    /// Listing is not supported (the default [`Error::Unsupported`]):
    /// memcached keeps no index of its keys, and walking every item on the
    /// server to find ours would cost what one lock must never cost.
    fn name(&self) -> &'static str {
        "memcached"
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn max_ttl(&self) -> Duration {
        MAX_TTL
    }

    /// Whole seconds: what memcached keeps.
    fn ttl_resolution(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn reopen(&self) -> Option<BoxFuture<'static, Result<Arc<dyn LockStore>>>> {
        self.shared.reopen.as_ref().map(kit::Reopen::open)
    }
}

/// How a store connected to `url` opens itself again
/// ([`LockStore::reopen`]).
fn reopen(url: &str, config: &MemcachedConfig) -> kit::Reopen {
    let (url, config) = (url.to_owned(), config.clone());
    kit::Reopen::new(move || {
        let (url, config) = (url.clone(), config.clone());
        async move { MemcachedStore::open(&url, config, false).await }
    })
}

impl fmt::Debug for MemcachedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemcachedStore")
            .field("server", &self.shared.address)
            .field("tls", &self.shared.tls)
            .field("connections", &self.shared.connections.len())
            .field("timeout", &self.shared.config.timeout)
            .field("waited_keys", &self.shared.waiters.len())
            .finish()
    }
}
