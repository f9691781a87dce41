//! A fault-injecting TCP proxy, for tests that need a server to misbehave.
//!
//! A [`Proxy`] listens on a free loopback port and forwards every connection
//! to a real server (Redis, Memcached, PostgreSQL, etcd). Between the two it
//! can make the faults a store meets in production, on demand:
//!
//! - [`stall`](Proxy::stall): bytes stop moving in both directions, on every
//!   connection, while the connections stay open: a partition, a frozen
//!   peer, a full socket buffer. Nothing is lost; [`resume`](Proxy::resume)
//!   delivers it.
//! - [`set_delay`](Proxy::set_delay): every reply is held back a while: a
//!   slow server or link.
//! - [`drop_subscribers`](Proxy::drop_subscribers): a connection that sent a
//!   pub/sub `SUBSCRIBE` is closed right after its next reply: a server (or
//!   load balancer) that accepts subscriptions and drops them.
//! - [`cut_all`](Proxy::cut_all): every open connection is closed at once.
//!
//! The proxy runs on the test's tokio runtime; dropping it stops accepting
//! and closes every connection.
//!
//! [`Proxy::start_in`] makes the same proxy listen inside a
//! [network namespace](crate::netns), on the address a client there will
//! dial anyway (the port a server announces), while it dials its upstream
//! from the host: every connection a process in the namespace makes to that
//! address crosses the proxy and meets its faults.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::netns::Netns;

/// What every connection consults before moving bytes.
struct Controls {
    /// True while stalled.
    stalled: watch::Sender<bool>,
    /// Added before each server-to-client chunk, in turn.
    delay: watch::Sender<Duration>,
    /// How long after it arrived each server-to-client chunk is delivered.
    latency: watch::Sender<Duration>,
    drop_subscribers: AtomicBool,
    connections: AtomicUsize,
    /// Bumped by `cut_all`: connections end when it changes.
    cuts: watch::Sender<u64>,
}

/// A TCP proxy in front of one server, with faults on demand. See the
/// [module docs](self).
pub struct Proxy {
    addr: SocketAddr,
    controls: Arc<Controls>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on `127.0.0.1:<free port>` and forwards every connection to
    /// `upstream` (`"127.0.0.1:6379"`).
    pub async fn start(upstream: &str) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        Self::forward(listener, upstream)
    }

    /// Listens on `listen` inside `netns` (`127.0.0.1:7001`: the namespace's
    /// own loopback) and forwards every connection to `upstream`, dialled
    /// from the host's namespace (`"127.0.0.1:7001"`: the host's server on
    /// the same port). Only processes in `netns` reach [`addr`](Proxy::addr);
    /// every fault works as on a proxy from [`start`](Proxy::start).
    pub async fn start_in(
        netns: &Netns,
        listen: SocketAddr,
        upstream: &str,
    ) -> std::io::Result<Proxy> {
        // Blocks this runtime thread while a short-lived thread enters the
        // namespace and binds: a system call or two, not a wait on the
        // network.
        let listener = TcpListener::from_std(netns.bind(listen)?)?;
        Self::forward(listener, upstream)
    }

    /// Accepts on `listener` and forwards to `upstream` until dropped.
    fn forward(listener: TcpListener, upstream: &str) -> std::io::Result<Proxy> {
        let addr = listener.local_addr()?;
        let controls = Arc::new(Controls {
            stalled: watch::channel(false).0,
            delay: watch::channel(Duration::ZERO).0,
            latency: watch::channel(Duration::ZERO).0,
            drop_subscribers: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
            cuts: watch::channel(0).0,
        });
        let upstream = upstream.to_owned();
        let accept = tokio::spawn({
            let controls = Arc::clone(&controls);
            async move {
                // The connections live in this set, so aborting the accept
                // task (when the proxy is dropped) closes them all.
                let mut connections = JoinSet::new();
                loop {
                    tokio::select! {
                        accepted = listener.accept() => {
                            let Ok((client, _)) = accepted else { continue };
                            controls.connections.fetch_add(1, Ordering::SeqCst);
                            connections.spawn(serve(client, upstream.clone(), Arc::clone(&controls)));
                        }
                        Some(_) = connections.join_next(), if !connections.is_empty() => {}
                    }
                }
            }
        });
        Ok(Proxy {
            addr,
            controls,
            accept,
        })
    }

    /// Where clients connect (inside the namespace, for a proxy from
    /// [`start_in`](Proxy::start_in)).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A URL for clients: `url("redis")` is `redis://127.0.0.1:<port>`.
    pub fn url(&self, scheme: &str) -> String {
        format!("{scheme}://{}", self.addr)
    }

    /// Stops forwarding bytes in both directions on every connection,
    /// current and future, without closing any; data is held until
    /// [`resume`](Proxy::resume).
    pub fn stall(&self) {
        self.controls.stalled.send_replace(true);
    }

    /// Forwards again, delivering what was held.
    pub fn resume(&self) {
        self.controls.stalled.send_replace(false);
    }

    /// Delays every chunk from the server to the client by `delay` (zero:
    /// none).
    pub fn set_delay(&self, delay: Duration) {
        self.controls.delay.send_replace(delay);
    }

    /// Delivers every chunk from the server to the client `latency` after
    /// it arrived (zero: at once), reading on meanwhile: a link whose
    /// answers all come that much late, however many are in flight, while
    /// requests go through. (Unlike [`set_delay`](Proxy::set_delay), whose
    /// chunks wait behind each other.)
    pub fn set_latency(&self, latency: Duration) {
        self.controls.latency.send_replace(latency);
    }

    /// When on, a connection whose client sent `SUBSCRIBE` is closed right
    /// after the server's next reply has been forwarded.
    pub fn drop_subscribers(&self, on: bool) {
        self.controls.drop_subscribers.store(on, Ordering::SeqCst);
    }

    /// Closes every open connection now.
    pub fn cut_all(&self) {
        self.controls.cuts.send_modify(|cuts| *cuts += 1);
    }

    /// How many connections have been accepted so far.
    pub fn connections(&self) -> usize {
        self.controls.connections.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Forwards one connection until either side closes, it is cut, or it is
/// dropped for subscribing.
async fn serve(client: TcpStream, upstream: String, controls: Arc<Controls>) {
    let Ok(server) = TcpStream::connect(&upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let subscribed = Arc::new(AtomicBool::new(false));
    let mut cuts = controls.cuts.subscribe();
    cuts.mark_unchanged();
    let upward = pump(
        client_read,
        server_write,
        Arc::clone(&controls),
        Direction::Up(Arc::clone(&subscribed)),
    );
    let downward = pump(
        server_read,
        client_write,
        Arc::clone(&controls),
        Direction::Down(subscribed),
    );
    tokio::select! {
        () = upward => {}
        () = downward => {}
        _ = cuts.changed() => {}
    }
}

enum Direction {
    /// Client to server: notes a `SUBSCRIBE`.
    Up(Arc<AtomicBool>),
    /// Server to client: delayed, and ends the connection after a reply to
    /// a subscriber when asked to.
    Down(Arc<AtomicBool>),
}

/// Copies `from` to `to` chunk by chunk, obeying the controls; returns when
/// either side is done or the connection must end. Reading goes on while
/// earlier chunks wait: each is stamped as it arrives, so a latency holds
/// every chunk the same time after its arrival.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    controls: Arc<Controls>,
    direction: Direction,
) {
    let (send, mut receive) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reading = async move {
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            let read = match from.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(read) => read,
            };
            if send
                .send((Instant::now(), buffer[..read].to_vec()))
                .is_err()
            {
                return;
            }
        }
    };
    let writing = async {
        let mut stalled = controls.stalled.subscribe();
        while let Some((arrived, chunk)) = receive.recv().await {
            if let Direction::Down(_) = direction {
                let latency = *controls.latency.borrow();
                if !latency.is_zero() {
                    tokio::time::sleep_until(arrived + latency).await;
                }
                let delay = *controls.delay.borrow();
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
            }
            // Held, not dropped, while stalled.
            if stalled.wait_for(|stalled| !stalled).await.is_err() {
                return;
            }
            if to.write_all(&chunk).await.is_err() {
                return;
            }
            match &direction {
                Direction::Up(subscribed) => {
                    if contains_ignoring_case(&chunk, b"SUBSCRIBE") {
                        subscribed.store(true, Ordering::SeqCst);
                    }
                }
                Direction::Down(subscribed) => {
                    if subscribed.load(Ordering::SeqCst)
                        && controls.drop_subscribers.load(Ordering::SeqCst)
                    {
                        return;
                    }
                }
            }
        }
    };
    tokio::pin!(writing);
    tokio::select! {
        () = &mut writing => return,
        // The reader is done: what it read is still delivered.
        () = reading => {}
    }
    writing.await;
}

fn contains_ignoring_case(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window.eq_ignore_ascii_case(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hang guard for things that should happen promptly.
    const GUARD: Duration = Duration::from_secs(10);

    /// An echo server on a free port; returns its address.
    async fn echo() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buffer = [0u8; 1024];
                    while let Ok(read) = socket.read(&mut buffer).await {
                        if read == 0 || socket.write_all(&buffer[..read]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    /// A proxy in front of an echo server of its own, and where its
    /// clients stand.
    struct Setup {
        proxy: Proxy,
        /// `None`: a proxy from `start`, clients on the host. `Some`: one
        /// from `start_in`, clients inside this namespace.
        netns: Option<Netns>,
    }

    impl Setup {
        /// Where the clients stand, for assertion messages.
        fn place(&self) -> &'static str {
            match self.netns {
                None => "from the host",
                Some(_) => "in a namespace",
            }
        }

        /// A client connection to the proxy.
        async fn connect(&self) -> TcpStream {
            let Some(netns) = &self.netns else {
                return TcpStream::connect(self.proxy.addr())
                    .await
                    .expect("connect");
            };
            // The kernel completes a loopback connect without the accept
            // task, so blocking this thread for it is safe.
            let stream = netns
                .connect(self.proxy.addr())
                .expect("connect in the namespace");
            stream.set_nonblocking(true).expect("nonblocking");
            TcpStream::from_std(stream).expect("on the runtime")
        }
    }

    /// Every way a proxy is made: `start`, and `start_in` when this process
    /// can make a namespace (a loud skip otherwise, a failure under
    /// `CI=true`). The namespaced proxy listens on its server's own port,
    /// as it does in front of a cluster node: a client that reached the
    /// server past it would show as an uncounted connection.
    async fn setups() -> Vec<Setup> {
        let mut setups = vec![Setup {
            proxy: Proxy::start(&echo().await).await.expect("proxy"),
            netns: None,
        }];
        match Netns::unavailable_reason() {
            None => {
                let upstream = echo().await;
                let netns = Netns::create().expect("a namespace");
                let listen = upstream.parse().expect("an address");
                let proxy = Proxy::start_in(&netns, listen, &upstream)
                    .await
                    .expect("a proxy in the namespace");
                setups.push(Setup {
                    proxy,
                    netns: Some(netns),
                });
            }
            Some(why) => {
                crate::harness::unavailable::<()>("the proxy tests in a network namespace", why);
            }
        }
        setups
    }

    async fn roundtrip(stream: &mut TcpStream, bytes: &[u8]) -> Vec<u8> {
        stream.write_all(bytes).await.expect("write");
        let mut back = vec![0u8; bytes.len()];
        tokio::time::timeout(GUARD, stream.read_exact(&mut back))
            .await
            .expect("echoed in time")
            .expect("read");
        back
    }

    #[tokio::test]
    async fn bytes_pass_through_and_connections_are_counted() {
        for setup in setups().await {
            let place = setup.place();
            let mut a = setup.connect().await;
            let mut b = setup.connect().await;
            assert_eq!(roundtrip(&mut a, b"hello").await, b"hello", "{place}");
            assert_eq!(roundtrip(&mut b, b"there").await, b"there", "{place}");
            assert_eq!(
                setup.proxy.connections(),
                2,
                "both connections counted, {place}"
            );
        }
    }

    // A stall must hold bytes (as a frozen peer does), not drop them.
    #[tokio::test]
    async fn a_stall_holds_bytes_until_resumed() {
        for setup in setups().await {
            let (proxy, place) = (&setup.proxy, setup.place());
            let mut stream = setup.connect().await;
            assert_eq!(roundtrip(&mut stream, b"before").await, b"before");
            proxy.stall();
            stream.write_all(b"held").await.expect("write");
            let mut back = [0u8; 4];
            let early =
                tokio::time::timeout(Duration::from_millis(200), stream.read_exact(&mut back))
                    .await;
            assert!(early.is_err(), "nothing arrives while stalled, {place}");
            proxy.resume();
            tokio::time::timeout(GUARD, stream.read_exact(&mut back))
                .await
                .expect("delivered after resume")
                .expect("read");
            assert_eq!(&back, b"held", "the held bytes, intact, {place}");
        }
    }

    #[tokio::test]
    async fn a_delay_holds_each_reply_back() {
        for setup in setups().await {
            let place = setup.place();
            let mut stream = setup.connect().await;
            setup.proxy.set_delay(Duration::from_millis(150));
            let started = tokio::time::Instant::now();
            assert_eq!(roundtrip(&mut stream, b"slow").await, b"slow");
            assert!(
                started.elapsed() >= Duration::from_millis(150),
                "the reply waited the delay, {place}: {:?}",
                started.elapsed()
            );
        }
    }

    // A subscriber's connection ends after its reply; others stay up.
    #[tokio::test]
    async fn subscribers_are_dropped_after_their_reply_and_others_are_not() {
        for setup in setups().await {
            let place = setup.place();
            setup.proxy.drop_subscribers(true);
            let mut subscriber = setup.connect().await;
            let mut other = setup.connect().await;
            assert_eq!(
                roundtrip(&mut subscriber, b"subscribe chan").await,
                b"subscribe chan",
                "the reply itself is delivered, {place}"
            );
            let mut rest = [0u8; 1];
            let closed = tokio::time::timeout(GUARD, subscriber.read(&mut rest))
                .await
                .expect("closed promptly");
            assert!(
                matches!(closed, Ok(0) | Err(_)),
                "then closed, {place}: {closed:?}"
            );
            assert_eq!(roundtrip(&mut other, b"get key").await, b"get key");
            assert_eq!(
                roundtrip(&mut other, b"again").await,
                b"again",
                "still open, {place}"
            );
        }
    }

    #[tokio::test]
    async fn cut_all_closes_every_connection() {
        for setup in setups().await {
            let place = setup.place();
            let mut stream = setup.connect().await;
            assert_eq!(roundtrip(&mut stream, b"up").await, b"up");
            setup.proxy.cut_all();
            let mut rest = [0u8; 1];
            let closed = tokio::time::timeout(GUARD, stream.read(&mut rest))
                .await
                .expect("closed promptly");
            assert!(
                matches!(closed, Ok(0) | Err(_)),
                "closed, {place}: {closed:?}"
            );
            let mut fresh = setup.connect().await;
            assert_eq!(
                roundtrip(&mut fresh, b"new").await,
                b"new",
                "new ones work, {place}"
            );
        }
    }
}
