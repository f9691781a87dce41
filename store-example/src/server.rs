//! [`MapServer`]: leases in a `HashMap`, served over TCP.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::protocol::{Reply, Request, read_line};

/// How many release notices a subscriber may fall behind before its
/// connection is closed (it reconnects and wakes all its waiters, so
/// nothing it missed is lost for good).
const BACKLOG: usize = 1024;

/// A lease server: every key's owner token and expiry in one `HashMap`,
/// on tokio's clock, served over TCP on `127.0.0.1` (the
/// [protocol](crate#the-protocol)).
///
/// Every request is carried out whole under one mutex, so each one is
/// atomic: an acquire is "set if absent or expired", a release is
/// "compare and delete", an extend "compare and expire". A lease found
/// expired by any request is removed then and there, and subscribers are
/// told, as they are of every release and force-release.
///
/// The leases live in this process only, and end with the server: it is
/// the smallest server a networked store can be tested against, not one
/// to deploy.
///
/// ```
/// use lock_store_example::{MapServer, MapStore};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = MapServer::start().await?;
/// let store = MapStore::connect(&server.url()).await?;
/// # let _ = store;
/// server.stop().await;
/// # Ok(()) }
/// ```
#[must_use = "the server stops when this value is dropped"]
pub struct MapServer {
    addr: SocketAddr,
    state: Arc<State>,
    /// Tells the accept loop to close every connection and end.
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

/// What the connections share.
struct State {
    leases: Mutex<HashMap<String, Lease>>,
    /// One notice per release, for the subscribers.
    releases: broadcast::Sender<String>,
    /// True while requests are held unanswered ([`MapServer::pause`]).
    paused: watch::Sender<bool>,
    /// Connections that sent a request other than `SUBSCRIBE`.
    clients: AtomicUsize,
}

/// One key's lease.
struct Lease {
    token: String,
    expires: Instant,
}

impl MapServer {
    /// Starts a server on a free port of `127.0.0.1`, on the current tokio
    /// runtime.
    ///
    /// # Errors
    ///
    /// When no port can be bound.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub async fn start() -> io::Result<MapServer> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            leases: Mutex::default(),
            releases: broadcast::channel(BACKLOG).0,
            paused: watch::Sender::new(false),
            clients: AtomicUsize::new(0),
        });
        let (shutdown, stopped) = oneshot::channel();
        let task = tokio::spawn(accept(listener, Arc::clone(&state), stopped));
        Ok(MapServer {
            addr,
            state,
            shutdown: Some(shutdown),
            task: Some(task),
        })
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL a [`MapStore`](crate::MapStore) connects to:
    /// `map://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("map://{}", self.addr)
    }

    /// Holds every request read from now on unanswered, as a server that
    /// hangs would, until [`resume`](MapServer::resume): for testing what
    /// a client does when its server goes silent. Connections are still
    /// accepted.
    pub fn pause(&self) {
        self.state.paused.send_replace(true);
    }

    /// Carries out the held requests, and answers every request again.
    pub fn resume(&self) {
        self.state.paused.send_replace(false);
    }

    /// How many connections have sent a request other than `SUBSCRIBE`: a
    /// client that keeps one request connection opens one more only after
    /// it threw the last away.
    pub fn clients(&self) -> usize {
        self.state.clients.load(Ordering::SeqCst)
    }

    /// Stops the server: stops listening, closes every connection, and
    /// returns once they are closed. Dropping the server stops it too,
    /// without waiting.
    pub async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl fmt::Debug for MapServer {
    // Not the leases: their tokens are what a release must prove.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MapServer")
            .field("addr", &self.addr)
            .field("clients", &self.clients())
            .finish_non_exhaustive()
    }
}

impl Drop for MapServer {
    fn drop(&mut self) {
        // Aborting the accept loop drops its connections' `JoinSet`, which
        // aborts each of them.
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Accepts connections until told to stop, then closes them all.
async fn accept(listener: TcpListener, state: Arc<State>, mut stop: oneshot::Receiver<()>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve(stream, Arc::clone(&state)));
                }
                // Out of file descriptors, most likely: let some close.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    connections.shutdown().await;
}

/// Answers one connection's requests in order, until it closes or
/// subscribes.
async fn serve(stream: TcpStream, state: Arc<State>) {
    let _ = stream.set_nodelay(true);
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut counted = false;
    // A read error or a line cut short: the client is gone, and half a
    // request is no request.
    while let Ok(Some(line)) = read_line(&mut reader).await {
        state.unpaused().await;
        let request = match Request::parse(&line) {
            Ok(request) => request,
            Err(why) => {
                if send(&mut write, &Reply::Error(why)).await.is_err() {
                    return;
                }
                continue;
            }
        };
        if request == Request::Subscribe {
            return subscriber(reader, write, &state).await;
        }
        if !counted {
            counted = true;
            state.clients.fetch_add(1, Ordering::SeqCst);
        }
        let mut out = String::new();
        for reply in state.apply(request) {
            out.push_str(&reply.encode());
        }
        if write.write_all(out.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Sends a subscriber a line per release until it hangs up or falls too
/// far behind.
async fn subscriber(
    mut reader: BufReader<OwnedReadHalf>,
    mut write: OwnedWriteHalf,
    state: &State,
) {
    // Subscribed before the confirmation is sent: every release after the
    // client reads `SUBSCRIBED` reaches it.
    let mut releases = state.releases.subscribe();
    if send(&mut write, &Reply::Subscribed).await.is_err() {
        return;
    }
    let mut ignored = [0u8; 64];
    loop {
        tokio::select! {
            released = releases.recv() => match released {
                Ok(key) => {
                    if send(&mut write, &Reply::Released(key)).await.is_err() {
                        return;
                    }
                }
                // Lagged: notices were lost; closing makes the client
                // reconnect and wake every waiter. Closed: the server ends.
                Err(_) => return,
            },
            // A subscriber has nothing more to say: anything it sends, or
            // its hanging up, ends the subscription.
            _ = reader.read(&mut ignored) => return,
        }
    }
}

async fn send(write: &mut OwnedWriteHalf, reply: &Reply) -> io::Result<()> {
    write.write_all(reply.encode().as_bytes()).await
}

impl State {
    fn leases(&self) -> MutexGuard<'_, HashMap<String, Lease>> {
        // No request panics while holding the lock, and every change is one
        // map operation: a poisoned map is still consistent.
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Returns at once unless the server is paused; then when it resumes.
    async fn unpaused(&self) {
        let mut paused = self.paused.subscribe();
        let _ = paused.wait_for(|paused| !paused).await;
    }

    /// Tells the subscribers `key` was released.
    fn announce(&self, key: &str) {
        // No subscriber: nobody to tell.
        let _ = self.releases.send(key.to_owned());
    }

    /// Removes `key`'s lease if it expired (telling the subscribers);
    /// whether a live one is left.
    fn live(&self, leases: &mut HashMap<String, Lease>, key: &str, now: Instant) -> bool {
        match leases.get(key) {
            Some(lease) if lease.expires <= now => {
                leases.remove(key);
                self.announce(key);
                false
            }
            Some(_) => true,
            None => false,
        }
    }

    /// Carries out `request`, whole, under the map's lock.
    fn apply(&self, request: Request) -> Vec<Reply> {
        let now = Instant::now();
        let mut leases = self.leases();
        let reply = match request {
            Request::Ping => Reply::Pong,
            Request::Acquire { key, token, ttl } => {
                let Some(expires) = expiry(now, ttl) else {
                    return vec![bad_ttl(ttl)];
                };
                // An expired lease is replaced at once, without a notice:
                // the key is held again, so a waiter woken now would only
                // find it taken.
                match leases.get(&key) {
                    Some(lease) if lease.expires > now => Reply::Held(lease.expires - now),
                    _ => {
                        leases.insert(key, Lease { token, expires });
                        Reply::Acquired
                    }
                }
            }
            Request::Release { key, token } => {
                let ours = self.live(&mut leases, &key, now) && leases[&key].token == token;
                if ours {
                    leases.remove(&key);
                    self.announce(&key);
                }
                yes_if(ours)
            }
            Request::Extend { key, token, ttl } => {
                let Some(expires) = expiry(now, ttl) else {
                    return vec![bad_ttl(ttl)];
                };
                let live = self.live(&mut leases, &key, now);
                match leases.get_mut(&key) {
                    Some(lease) if live && lease.token == token => {
                        lease.expires = expires;
                        Reply::Yes
                    }
                    _ => Reply::No,
                }
            }
            Request::Force { key } => {
                let live = self.live(&mut leases, &key, now);
                if live {
                    leases.remove(&key);
                    self.announce(&key);
                }
                yes_if(live)
            }
            Request::Holder { key } => {
                if self.live(&mut leases, &key, now) {
                    Reply::Holder {
                        token: leases[&key].token.clone(),
                        remaining: leases[&key].expires - now,
                    }
                } else {
                    Reply::Free
                }
            }
            Request::List { prefix } => return self.list(&mut leases, &prefix, now),
            Request::Subscribe => Reply::Error("SUBSCRIBE is handled by the connection".into()),
        };
        vec![reply]
    }

    /// Every live lease under `prefix`; the expired ones found on the way
    /// are removed, and announced.
    fn list(&self, leases: &mut HashMap<String, Lease>, prefix: &str, now: Instant) -> Vec<Reply> {
        let mut entries = vec![Reply::Listed(0)];
        let mut expired = Vec::new();
        for (key, lease) in leases.iter() {
            if !key.starts_with(prefix) {
                continue;
            }
            if lease.expires <= now {
                expired.push(key.clone());
            } else {
                entries.push(Reply::Entry {
                    key: key.clone(),
                    token: lease.token.clone(),
                    remaining: lease.expires - now,
                });
            }
        }
        for key in expired {
            leases.remove(&key);
            self.announce(&key);
        }
        entries[0] = Reply::Listed(entries.len() - 1);
        entries
    }
}

/// When a lease of `ttl` taken `now` ends; `None` for a TTL the server
/// does not keep (zero, or past what the clock can represent).
fn expiry(now: Instant, ttl: Duration) -> Option<Instant> {
    if ttl.is_zero() {
        return None;
    }
    now.checked_add(ttl)
}

fn bad_ttl(ttl: Duration) -> Reply {
    Reply::Error(format!(
        "a ttl of {ttl:?} cannot be kept: give one above zero and below 100 years"
    ))
}

fn yes_if(done: bool) -> Reply {
    if done { Reply::Yes } else { Reply::No }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> State {
        State {
            leases: Mutex::default(),
            releases: broadcast::channel(BACKLOG).0,
            paused: watch::Sender::new(false),
            clients: AtomicUsize::new(0),
        }
    }

    fn acquire(key: &str, token: &str, ttl: Duration) -> Request {
        Request::Acquire {
            key: key.into(),
            token: token.into(),
            ttl,
        }
    }

    // A release or extend that reads and then writes would let a holder
    // whose lease expired and moved on touch the next holder's lease.
    #[tokio::test(start_paused = true)]
    async fn release_and_extend_change_only_the_lease_with_their_token() {
        let state = state();
        let ttl = Duration::from_secs(1);
        assert_eq!(state.apply(acquire("k", "first", ttl)), [Reply::Acquired]);
        tokio::time::advance(ttl).await;
        assert_eq!(
            state.apply(acquire("k", "second", ttl)),
            [Reply::Acquired],
            "an expired lease counts as absent"
        );
        let stale = |request| state.apply(request);
        assert_eq!(
            stale(Request::Release {
                key: "k".into(),
                token: "first".into()
            }),
            [Reply::No],
            "the first holder's late release"
        );
        assert_eq!(
            stale(Request::Extend {
                key: "k".into(),
                token: "first".into(),
                ttl
            }),
            [Reply::No],
            "the first holder's late extend"
        );
        assert_eq!(
            state.apply(Request::Holder { key: "k".into() }),
            [Reply::Holder {
                token: "second".into(),
                remaining: ttl
            }],
            "the second holder's lease is untouched"
        );
    }

    // Subscribers wake waiters on these notices; an expiry found by a
    // request is a release as far as a waiter can tell.
    #[tokio::test(start_paused = true)]
    async fn releases_force_releases_and_expiries_found_are_announced() {
        let state = state();
        let mut notices = state.releases.subscribe();
        let ttl = Duration::from_secs(1);
        state.apply(acquire("a", "t", ttl));
        state.apply(Request::Release {
            key: "a".into(),
            token: "t".into(),
        });
        state.apply(acquire("b", "t", ttl));
        state.apply(Request::Force { key: "b".into() });
        state.apply(acquire("c", "t", ttl));
        tokio::time::advance(ttl).await;
        assert_eq!(
            state.apply(Request::List { prefix: "".into() }),
            [Reply::Listed(0)],
            "an expired lease is not listed"
        );
        let mut heard = Vec::new();
        while let Ok(key) = notices.try_recv() {
            heard.push(key);
        }
        assert_eq!(heard, ["a", "b", "c"]);
    }
}
