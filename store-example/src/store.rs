//! [`MapStore`]: the [`LockStore`] over a [`MapServer`](crate::MapServer).

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use lock_core::store::kit::{
    Background, CallError, Deadline, Interest, MAX_TTL, Waiters, check_key, check_lease, redacted,
    store_ttl,
};
use lock_core::store::{AcquireRequest, Attempt, BoxFuture, LockStore};
use lock_core::{Error, Holder, Result};
use tokio::sync::Mutex;

use crate::config::{MapConfig, address};
use crate::connection::Connection;
use crate::protocol::{Reply, Request};
use crate::wakeups;

/// Leases kept by a [`MapServer`](crate::MapServer), shared by every
/// process that reaches it.
///
/// ```
/// use std::time::Duration;
/// use lock_core::LockManager;
/// use lock_store_example::{MapServer, MapStore};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = MapServer::start().await?;
/// let locks = LockManager::new(MapStore::connect(&server.url()).await?);
/// let ran = locks
///     .lock("nightly-export", Duration::from_secs(600))
///     .run(async { Ok::<_, lock_core::Error>("exported") })
///     .await?;
/// assert_eq!(ran, Some("exported"));
/// # Ok(()) }
/// ```
///
/// # Connections
///
/// Requests go over one connection, one at a time. A call takes the
/// connection out of its slot for as long as it uses it, and puts it back
/// only once the reply is read. A call that runs out of time, or whose
/// future is dropped mid-request (a caller's timeout, a lost `select!`),
/// takes the connection down with it, and the next call opens a new one:
///
/// ```text
/// call A   take conn ─ write ACQUIRE ─ (no reply: time-out) ─ drop conn
/// server                       ... answers ACQUIRED late, to nobody
/// call B                                  slot empty ─ open conn ─ write HOLDER ─ FREE
/// ```
///
/// Put back instead, the connection would hand call B the reply meant for
/// call A. Every call, waiting for the slot and connecting included, is
/// bounded by [`MapConfig::timeout`].
///
/// # Waiting
///
/// A second connection subscribes to the server's releases, so a waiter
/// is woken by any release, force-release or expiry the server sees,
/// from any process. It reconnects with backoff when it drops, and wakes
/// every waiter once it is back, since a release may have gone unheard.
///
/// # The guarantee, stated honestly
///
/// The server keeps leases in its memory: they end when it stops. No
/// fencing tokens ([`fencing`](LockStore::fencing) is false). A call that
/// timed out may still have been carried out; the runtime gives back an
/// acquire that failed or was dropped, by its token.
#[derive(Clone)]
pub struct MapStore {
    shared: Arc<Shared>,
}

/// What the store's clones share; its listener stops with the last one.
struct Shared {
    /// `host:port`.
    address: String,
    /// The URL as it may be shown.
    shown: String,
    config: MapConfig,
    /// The request connection, when no call is using it.
    slot: Mutex<Option<Connection>>,
    waiters: Arc<Waiters>,
    /// The subscription task (it holds the waiters, not this state, so it
    /// does not keep the store alive).
    _listener: Background,
}

impl MapStore {
    /// Connects to the [`MapServer`](crate::MapServer) at `url`
    /// (`map://host:port`), with the default [`MapConfig`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidUrl`] for a URL that is not `map://host:port`;
    /// [`Error::Store`] when the server does not answer within the
    /// timeout.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime: the store's subscription runs on it.
    pub async fn connect(url: &str) -> Result<MapStore> {
        Self::connect_with(url, MapConfig::default()).await
    }

    /// Connects to the server at `url`, with `config`.
    ///
    /// # Errors
    ///
    /// As [`connect`](MapStore::connect).
    ///
    /// # Panics
    ///
    /// As [`connect`](MapStore::connect).
    pub async fn connect_with(url: &str, config: MapConfig) -> Result<MapStore> {
        let address = address(url)?;
        let shown = redacted(url);
        let waiters = Arc::new(Waiters::default());
        let mut listener = Background::new();
        listener.spawn(wakeups::listen(
            address.clone(),
            config.timeout,
            Arc::clone(&waiters),
        ));
        let store = MapStore {
            shared: Arc::new(Shared {
                address,
                shown,
                config,
                slot: Mutex::new(None),
                waiters,
                _listener: listener,
            }),
        };
        let shown = store.shared.shown.clone();
        match store.call("connect to", &shown, Request::Ping).await?[..] {
            [Reply::Pong] => Ok(store),
            ref other => Err(unexpected("connect to", &shown, other)),
        }
    }

    /// The configuration the store runs with.
    pub fn config(&self) -> &MapConfig {
        &self.shared.config
    }

    /// Sends `request` and reads its replies, within the call's deadline;
    /// an `ERROR` reply is the call's error.
    async fn call(
        &self,
        operation: &'static str,
        key: &str,
        request: Request,
    ) -> Result<Vec<Reply>> {
        let deadline = Deadline::after(self.shared.config.timeout, "MapConfig::timeout");
        let replies = match deadline.bound(self.exchange(&request)).await {
            Ok(replies) => replies,
            // The I/O error itself: wrapped in `CallError`, whose message
            // repeats its source's, `Error::chain` would show it twice.
            Err(CallError::Store(e)) => return Err(Error::store(operation, key, e)),
            Err(timed_out) => return Err(Error::store(operation, key, timed_out)),
        };
        match &replies[..] {
            [Reply::Error(why)] => Err(Error::store(
                operation,
                key,
                format!("the map server refused the request: {why}"),
            )),
            _ => Ok(replies),
        }
    }

    /// One request and its replies on the request connection, opening it
    /// when the slot is empty.
    async fn exchange(&self, request: &Request) -> io::Result<Vec<Reply>> {
        let mut slot = self.shared.slot.lock().await;
        // Out of the slot while in use: if this future is dropped (or
        // fails) before the reply is read, the connection is dropped with
        // it, never put back with a reply still on its way.
        let mut connection = match slot.take() {
            Some(connection) => connection,
            None => Connection::open(&self.shared.address).await?,
        };
        let replies = connection.call(request).await?;
        *slot = Some(connection);
        Ok(replies)
    }

    /// A `YES`/`NO` request's answer.
    async fn answer(&self, operation: &'static str, key: &str, request: Request) -> Result<bool> {
        match self.call(operation, key, request).await?[..] {
            [Reply::Yes] => Ok(true),
            [Reply::No] => Ok(false),
            ref other => Err(unexpected(operation, key, other)),
        }
    }
}

/// The error for replies that do not answer the request.
fn unexpected(operation: &'static str, key: &str, replies: &[Reply]) -> Error {
    Error::store(
        operation,
        key,
        format!("the map server answered {replies:?}, which does not answer the request"),
    )
}

impl LockStore for MapStore {
    fn acquire<'a>(&'a self, request: AcquireRequest<'a>) -> BoxFuture<'a, Result<Attempt>> {
        Box::pin(async move {
            let key = request.key;
            check_lease(key, request.ttl, self)?;
            // Before the request is sent: a release the server makes
            // between its answer and the caller's sleep must still wake it.
            let interest = request.wake.then(|| self.shared.waiters.register(key));
            let acquire = Request::Acquire {
                key: key.to_owned(),
                token: request.token.to_owned(),
                ttl: store_ttl(request.ttl, self),
            };
            match self.call("acquire", key, acquire).await?[..] {
                [Reply::Acquired] => Ok(Attempt::Acquired { fence: None }),
                [Reply::Held(remaining)] => Ok(Attempt::Held {
                    remaining: Some(remaining),
                    // `into_wakeup`: a waiter that leaves between its wake
                    // and its next answer passes the wake on.
                    wakeup: interest.map(Interest::into_wakeup),
                }),
                ref other => Err(unexpected("acquire", key, other)),
            }
        })
    }

    fn release<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            check_key(key)?;
            let release = Request::Release {
                key: key.to_owned(),
                token: token.to_owned(),
            };
            self.answer("release", key, release).await
        })
    }

    fn extend<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            check_lease(key, ttl, self)?;
            let extend = Request::Extend {
                key: key.to_owned(),
                token: token.to_owned(),
                ttl: store_ttl(ttl, self),
            };
            self.answer("extend", key, extend).await
        })
    }

    fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            check_key(key)?;
            let force = Request::Force {
                key: key.to_owned(),
            };
            self.answer("force-release", key, force).await
        })
    }

    fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Holder>>> {
        Box::pin(async move {
            check_key(key)?;
            let holder = Request::Holder {
                key: key.to_owned(),
            };
            match self.call("read the holder of", key, holder).await?[..] {
                [Reply::Free] => Ok(None),
                [
                    Reply::Holder {
                        ref token,
                        remaining,
                    },
                ] => Ok(Some(Holder::new(token.clone(), remaining))),
                ref other => Err(unexpected("read the holder of", key, other)),
            }
        })
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<(String, Holder)>>> {
        Box::pin(async move {
            let list = Request::List {
                prefix: prefix.to_owned(),
            };
            let replies = self.call("list", prefix, list).await?;
            if !matches!(replies.first(), Some(Reply::Listed(_))) {
                return Err(unexpected("list", prefix, &replies));
            }
            let mut held = Vec::with_capacity(replies.len().saturating_sub(1));
            for reply in replies.into_iter().skip(1) {
                if let Reply::Entry {
                    key,
                    token,
                    remaining,
                } = reply
                {
                    held.push((key, Holder::new(token, remaining)));
                }
            }
            Ok(held)
        })
    }

    fn name(&self) -> &'static str {
        "map"
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn max_ttl(&self) -> Duration {
        MAX_TTL
    }
}

impl fmt::Debug for MapStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MapStore")
            .field("url", &self.shared.shown)
            .field("timeout", &self.shared.config.timeout)
            .field("waited_keys", &self.shared.waiters.len())
            .finish()
    }
}
