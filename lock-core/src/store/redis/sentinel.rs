//! Redis behind Sentinel: the `redis+sentinel://` URL, and a command
//! connection that follows the primary the sentinels name.
//!
//! Discovery is the redis crate's own ([`SentinelClient`]): it asks the
//! sentinels for the service's primary and checks, with `ROLE`, that the
//! node it reaches is one; when their lists name none (right after a
//! failover), each sentinel is asked for the primary's address in turn
//! ([`discovery`](super::discovery)). What this file adds is what a lock
//! store needs on top: one multiplexed connection to that primary, shared by every
//! call, dropped and found again as soon as a call shows it no longer
//! reaches a primary (the connection broke, the node answers `READONLY`
//! because it was demoted, or a call was cut off at its time bound while
//! the node stayed silent). The failing call itself returns its error: the
//! store never retries a write that may have applied. The next call asks
//! the sentinels again, so after a failover the store moves to the new
//! primary by itself; while there is none, calls fail within their bound.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ::redis::aio::{ConnectionLike, MultiplexedConnection};
use ::redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use ::redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ErrorKind, IntoConnectionInfo as _,
    Pipeline, RedisConnectionInfo, RedisError, RedisFuture, RedisResult, ServerErrorKind,
    TlsMode, Value,
};

use super::config::STORE;
use super::discovery::{self, Asking};
use crate::store::BoxFuture;
use crate::store::kit::{StoreUrl, scheme};
use crate::{Error, Result};

/// The port of a sentinel given without one.
const SENTINEL_PORT: u16 = 26379;

/// What a `redis+sentinel://` URL says.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct SentinelUrl {
    /// `host:port` of each sentinel.
    pub(super) sentinels: Vec<(String, u16)>,
    /// The name the sentinels monitor the primary under.
    pub(super) service: String,
    pub(super) tls: bool,
    pub(super) db: i64,
    /// For the data nodes (primary and replicas).
    pub(super) username: Option<String>,
    pub(super) password: Option<String>,
    /// For the sentinels themselves.
    pub(super) sentinel_username: Option<String>,
    pub(super) sentinel_password: Option<String>,
}

/// Whether `url` names Redis behind Sentinel.
pub(super) fn is_sentinel_url(url: &str) -> bool {
    matches!(scheme(url), Some((scheme, _)) if scheme == "redis+sentinel" || scheme == "rediss+sentinel")
}

/// How a valid URL looks, for every parse error.
const EXAMPLE: &str = "use a URL like redis+sentinel://[user:password@]127.0.0.1:26379,127.0.0.1:26380/mymaster\
     [?db=0&sentinel_password=...]";

impl SentinelUrl {
    /// Reads `redis+sentinel://[user[:password]@]host[:port][,host[:port]...]/service[?query]`
    /// (`rediss+sentinel://` for TLS) as every store URL is read
    /// ([`StoreUrl`]). The query may give `db`, `sentinel_username` and
    /// `sentinel_password`. Errors never show a password.
    pub(super) fn parse(url: &str) -> std::result::Result<SentinelUrl, String> {
        let parsed = StoreUrl::parse(url).map_err(|why| format!("{why}; {EXAMPLE}"))?;
        let tls = match parsed.scheme() {
            "redis+sentinel" => false,
            "rediss+sentinel" => true,
            _ => return Err(format!("not a Sentinel URL; {EXAMPLE}")),
        };
        let service = parsed
            .path()
            .ok_or_else(|| format!("no service name after the sentinels; {EXAMPLE}"))?
            .trim_end_matches('/');
        if service.is_empty() || service.contains('/') {
            return Err(format!(
                "the path must be the one service name the sentinels monitor; {EXAMPLE}"
            ));
        }
        if parsed.fragment().is_some() {
            return Err(format!("a Sentinel URL has no `#` part; {EXAMPLE}"));
        }
        if parsed.hosts().is_empty() {
            return Err(format!("no sentinel is named; {EXAMPLE}"));
        }
        let sentinels = parsed
            .hosts()
            .iter()
            .map(|host| (host.bare().to_owned(), host.port().unwrap_or(SENTINEL_PORT)))
            .collect();
        let mut read = SentinelUrl {
            sentinels,
            service: service.to_owned(),
            tls,
            db: 0,
            username: parsed.user().map(str::to_owned),
            password: parsed.password().map(str::to_owned),
            sentinel_username: None,
            sentinel_password: None,
        };
        for (name, value) in parsed.query() {
            match name {
                "db" => {
                    read.db = value
                        .parse()
                        .map_err(|_| format!("db must be a number; {EXAMPLE}"))?;
                }
                "sentinel_username" => read.sentinel_username = Some(value.to_owned()),
                "sentinel_password" => read.sentinel_password = Some(value.to_owned()),
                other => {
                    return Err(format!(
                        "unknown URL setting {other:?}: a Sentinel URL takes db, \
                         sentinel_username and sentinel_password"
                    ));
                }
            }
        }
        Ok(read)
    }

    /// `sentinel1,sentinel2/service`, for `Debug` and errors: never a
    /// password.
    pub(super) fn shown(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|(host, port)| format!("{host}:{port}"))
            .collect();
        format!("{}/{}", hosts.join(","), self.service)
    }

    /// What [`discovery`] needs to ask each sentinel for the primary's
    /// address itself, and to reach the node it names.
    fn asking(&self) -> Result<Asking> {
        let sentinels = self
            .sentinels
            .iter()
            .map(|(host, port)| {
                let mut settings = RedisConnectionInfo::default();
                if let Some(username) = &self.sentinel_username {
                    settings = settings.set_username(username);
                }
                if let Some(password) = &self.sentinel_password {
                    settings = settings.set_password(password);
                }
                Ok(self
                    .addr(host, *port)
                    .into_connection_info()?
                    .set_redis_settings(settings))
            })
            .collect::<RedisResult<Vec<_>>>()
            .map_err(|e| {
                Error::invalid_config(
                    STORE,
                    format!("the sentinels of {} cannot be reached: {e}", self.shown()),
                )
            })?;
        let mut node = RedisConnectionInfo::default().set_db(self.db);
        if let Some(username) = &self.username {
            node = node.set_username(username);
        }
        if let Some(password) = &self.password {
            node = node.set_password(password);
        }
        Ok(Asking {
            sentinels,
            service: self.service.clone(),
            tls: self.tls,
            node,
        })
    }

    /// The address of the node at `host:port`, over TLS for a
    /// `rediss+sentinel://` URL.
    fn addr(&self, host: &str, port: u16) -> ConnectionAddr {
        if self.tls {
            ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host.to_owned(), port)
        }
    }

    /// The redis crate's client for the primary of this service.
    fn client(&self) -> Result<SentinelClient> {
        if self.tls && !cfg!(feature = "redis-tls") {
            return Err(Error::invalid_config(
                STORE,
                "`rediss+sentinel://` URLs need lock-core's `redis-tls` feature",
            ));
        }
        let sentinels = self
            .sentinels
            .iter()
            .map(|(host, port)| self.addr(host, *port));
        let building = || {
            let mut builder =
                SentinelClientBuilder::new(sentinels, &self.service, SentinelServerType::Master)?
                    .set_client_to_redis_db(self.db);
            if self.tls {
                builder = builder
                    .set_client_to_redis_tls_mode(TlsMode::Secure)
                    .set_client_to_sentinel_tls_mode(TlsMode::Secure);
            }
            if let Some(username) = &self.username {
                builder = builder.set_client_to_redis_username(username);
            }
            if let Some(password) = &self.password {
                builder = builder.set_client_to_redis_password(password);
            }
            if let Some(username) = &self.sentinel_username {
                builder = builder.set_client_to_sentinel_username(username);
            }
            if let Some(password) = &self.sentinel_password {
                builder = builder.set_client_to_sentinel_password(password);
            }
            builder.build()
        };
        building().map_err(|e| {
            Error::invalid_config(
                STORE,
                format!("the Sentinel client for {} cannot be built: {e}", self.shown()),
            )
        })
    }
}

/// The command connection to the primary the sentinels name: see the
/// [module docs](self). Clones share one connection.
#[derive(Clone)]
pub(super) struct SentinelConnection {
    inner: Arc<Inner>,
}

struct Inner {
    /// Asks the sentinels; one question at a time.
    client: tokio::sync::Mutex<SentinelClient>,
    /// Asks each sentinel in turn, when their lists name no primary.
    asking: Asking,
    /// Settings of each connection to a primary.
    config: AsyncConnectionConfig,
    /// The connection to the primary, while it is believed to be one.
    current: Mutex<Option<Primary>>,
    db: i64,
    /// Counts the primaries connected to, so a failing call drops only the
    /// connection it used, never a newer one.
    generations: std::sync::atomic::AtomicU64,
}

#[derive(Clone)]
struct Primary {
    connection: MultiplexedConnection,
    generation: u64,
    /// The node it reaches, as the sentinels named it.
    addr: ConnectionAddr,
}

impl SentinelConnection {
    /// A connection for `url`'s service, opened at once (so a wrong URL or
    /// unreachable sentinels fail at connect): each call's own bound is
    /// `timeout`, applied by the caller.
    pub(super) async fn open(url: &SentinelUrl, timeout: Duration) -> Result<SentinelConnection> {
        let client = url.client()?;
        let asking = url.asking()?;
        let connection = SentinelConnection {
            inner: Arc::new(Inner {
                client: tokio::sync::Mutex::new(client),
                asking,
                // No response timeout of the connection's own: every call
                // is already bounded by the store's deadline.
                config: AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(None),
                current: Mutex::new(None),
                db: url.db,
                generations: std::sync::atomic::AtomicU64::new(0),
            }),
        };
        Ok(connection)
    }

    /// Connects to the primary now, if not connected: the first call of a
    /// new store (to fail at connect when nothing answers).
    pub(super) async fn connected(&self) -> RedisResult<()> {
        self.primary().await.map(|_| ())
    }

    /// A client for the primary, asking the sentinels afresh: for the
    /// release subscription, which opens a connection of its own.
    ///
    /// Boxed as a `dyn` future here, and so is discovery in
    /// [`primary`](Self::primary) (and [`discovery::primary`] itself): the
    /// redis crate's discovery is a deep state machine, and nested into
    /// the store's own futures it overflows the compiler's query depth in
    /// the crates that call them.
    ///
    /// When the sentinels name another node than the one the command
    /// connection reaches, that connection is dropped too: the subscription
    /// is lost and found again exactly when the primary fails over, and a
    /// waiter it then wakes retries at once, on the new primary, instead of
    /// spending its retry finding the old connection dead.
    pub(super) fn primary_client(&self) -> BoxFuture<'_, RedisResult<Client>> {
        Box::pin(async move {
            let client = {
                let mut sentinels = self.inner.client.lock().await;
                discovery::primary(&mut sentinels, &self.inner.asking, &self.inner.config).await?
            };
            let named = client.get_connection_info().addr();
            let mut slot = self.slot();
            if slot.as_ref().is_some_and(|current| &current.addr != named) {
                *slot = None;
            }
            Ok(client)
        })
    }

    /// The connection to the primary, found through the sentinels when
    /// there is none.
    async fn primary(&self) -> RedisResult<Primary> {
        if let Some(primary) = self.current() {
            return Ok(primary);
        }
        let mut client = self.inner.client.lock().await;
        // Another call may have found it while this one waited its turn.
        if let Some(primary) = self.current() {
            return Ok(primary);
        }
        let discovery: BoxFuture<'_, RedisResult<(MultiplexedConnection, ConnectionAddr)>> =
            Box::pin(async {
                let client =
                    discovery::primary(&mut client, &self.inner.asking, &self.inner.config)
                        .await?;
                let addr = client.get_connection_info().addr().clone();
                let connection = client
                    .get_multiplexed_async_connection_with_config(&self.inner.config)
                    .await?;
                Ok((connection, addr))
            });
        let (connection, addr) = discovery.await?;
        let generation = 1 + self
            .inner
            .generations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let primary = Primary {
            connection,
            generation,
            addr,
        };
        *self.slot() = Some(primary.clone());
        Ok(primary)
    }

    /// How many primaries the command connection has been opened to: it
    /// changes when the store finds a new one.
    pub(super) fn generation(&self) -> u64 {
        self.inner
            .generations
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The settings of each connection to a primary.
    pub(super) fn connection_config(&self) -> AsyncConnectionConfig {
        self.inner.config.clone()
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Primary>> {
        self.inner
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn current(&self) -> Option<Primary> {
        self.slot().clone()
    }

    /// Stops using the connection of `generation`, if it is still the
    /// current one: the next call asks the sentinels again.
    fn forget(&self, generation: u64) {
        let mut slot = self.slot();
        if slot.as_ref().is_some_and(|p| p.generation == generation) {
            *slot = None;
        }
    }

    /// The primary's connection for one call, and the [`Pending`] that
    /// forgets that connection unless the call shows it still reaches a
    /// primary.
    async fn begin(&self) -> RedisResult<(MultiplexedConnection, Pending<'_>)> {
        let Primary {
            connection,
            generation,
            ..
        } = self.primary().await?;
        let pending = Pending {
            connection: self,
            generation,
            answered: false,
        };
        Ok((connection, pending))
    }
}

/// One call on the primary's connection. Dropped before
/// [`answered`](Pending::answered) (the call was cut off at its time bound:
/// the node may be gone without a word), or answered with an error that
/// shows the connection no longer reaches a primary, it forgets the
/// connection, and the next call asks the sentinels again.
struct Pending<'a> {
    connection: &'a SentinelConnection,
    generation: u64,
    answered: bool,
}

impl Pending<'_> {
    fn answered<T>(mut self, reply: &RedisResult<T>) {
        self.answered = !reply.as_ref().is_err_and(not_a_primary);
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.connection.forget(self.generation);
        }
    }
}

/// Whether `error` says the connection no longer reaches a primary: it
/// broke, or the node was demoted (`READONLY`) or lost its own primary
/// (`MASTERDOWN`).
fn not_a_primary(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_unrecoverable_error()
        || matches!(
            error.kind(),
            ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
        )
}

impl ConnectionLike for SentinelConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (mut connection, pending) = self.begin().await?;
            let reply = connection.req_packed_command(cmd).await;
            pending.answered(&reply);
            reply
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (mut connection, pending) = self.begin().await?;
            let reply = connection.req_packed_commands(cmd, offset, count).await;
            pending.answered(&reply);
            reply
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.db
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_url_gives_its_sentinels_service_database_and_both_passwords() {
        let url = SentinelUrl::parse(
            "redis+sentinel://app:s%40cret@10.0.0.1:26379,10.0.0.2,[::1]:26381/mymaster\
             ?db=2&sentinel_password=watch",
        )
        .expect("valid");
        assert_eq!(
            url,
            SentinelUrl {
                sentinels: vec![
                    ("10.0.0.1".to_owned(), 26379),
                    ("10.0.0.2".to_owned(), 26379),
                    ("::1".to_owned(), 26381),
                ],
                service: "mymaster".to_owned(),
                tls: false,
                db: 2,
                username: Some("app".to_owned()),
                password: Some("s@cret".to_owned()),
                sentinel_username: None,
                sentinel_password: Some("watch".to_owned()),
            }
        );
        assert_eq!(
            url.shown(),
            "10.0.0.1:26379,10.0.0.2:26379,::1:26381/mymaster"
        );
        let tls = SentinelUrl::parse("rediss+sentinel://:pw@h:1/svc").expect("valid");
        assert!(tls.tls, "rediss+ is TLS");
        assert_eq!(tls.username, None, "a password alone");
        assert_eq!(tls.password.as_deref(), Some("pw"));
    }

    #[test]
    fn a_sentinel_scheme_is_read_whatever_its_case() {
        // Schemes are case-insensitive (RFC 3986), and lock_core::connect
        // already reads them so: `RedisStore::connect` must not hand a
        // Sentinel URL in capitals to the plain client as a server address.
        assert!(is_sentinel_url("REDIS+Sentinel://h:26379/svc"));
        let tls = SentinelUrl::parse("Rediss+SENTINEL://:pw@h:1/svc").expect("valid");
        assert!(tls.tls, "rediss+ is TLS in any case");
        assert_eq!(tls.password.as_deref(), Some("pw"));
        assert!(!is_sentinel_url("redis://h:6379"), "a plain URL is not one");
    }

    #[test]
    fn a_bad_sentinel_url_says_what_a_good_one_looks_like_and_never_shows_its_password() {
        for bad in [
            "redis+sentinel://h:26379",
            "redis+sentinel://h:26379/",
            "redis+sentinel://h:port/svc",
            "redis+sentinel://,h/svc",
            "redis+sentinel://:hunter2@h/svc?db=x",
            "redis+sentinel://:hunter2@h/svc?colour=blue",
            "redis+sentinel://h/a/b",
        ] {
            let error = SentinelUrl::parse(bad).expect_err(bad);
            assert!(!error.contains("hunter2"), "{bad}: password shown: {error}");
            assert!(
                error.contains("redis+sentinel://") || error.contains("sentinel_password"),
                "{bad}: says what to write: {error}"
            );
        }
    }
}
