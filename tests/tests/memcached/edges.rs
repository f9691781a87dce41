//! `MemcachedStore` at the edges: servers too old for the meta protocol it
//! speaks, a connection whose replies are out of step with its requests, a
//! release or extend that straddles a server restart, and a server without
//! CAS.
//!
//! Each test reproduces a way the promise once broke. Time bounds are hang
//! guards unless the bound itself is the behaviour under test.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{LockManager, LockStore, MemcachedConfig, MemcachedStore};
use lock_tests::memcached;
use lock_tests::proxy::Proxy;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex as AsyncMutex;

/// A TTL no test outlives.
const LONG: Duration = Duration::from_secs(60);

/// Generous bound on what should happen promptly: a hang guard.
const HANG_GUARD: Duration = Duration::from_secs(30);

fn unique(what: &str) -> String {
    let id: u64 = rand::random();
    format!("test-{what}-{id:016x}:")
}

/// A store on `url` whose calls may wait as long as the tests hold replies
/// back, with one connection, so every name's requests share it.
async fn one_connection(url: &str) -> MemcachedStore {
    let config = MemcachedConfig::new()
        .timeout(Duration::from_secs(20))
        .pool_size(1);
    MemcachedStore::connect_with(url, config)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {}", e.chain()))
}

// ---------------------------------------------------------------------------
// What memcached itself holds, read without the store.

/// Standard base64 with padding: the meta protocol's `b` keys.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let sextet = |shift: u32| char::from(ALPHABET[((n >> shift) & 63) as usize]);
        out.push(sextet(18));
        out.push(sextet(12));
        out.push(if chunk.len() > 1 { sextet(6) } else { '=' });
        out.push(if chunk.len() > 2 { sextet(0) } else { '=' });
    }
    out
}

/// The token and CAS memcached on `port` holds for the lock key `key` (a
/// short key: the store keeps it as `k<key>`, base64-encoded), read with a
/// plain `mg`; `None` when there is no such item.
async fn raw_item(port: u16, key: &str) -> Option<(String, u64)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to memcached");
    let lease = base64(format!("k{key}").as_bytes());
    stream
        .write_all(format!("mg {lease} b v c\r\n").as_bytes())
        .await
        .expect("write mg");
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).await.expect("read mg reply");
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.first() {
        Some(&"EN") => None,
        Some(&"VA") => {
            let length: usize = words[1].parse().expect("a VA length");
            let cas = words
                .iter()
                .find_map(|word| word.strip_prefix('c'))
                .and_then(|digits| digits.parse().ok())
                .expect("a CAS on the reply");
            let mut value = vec![0u8; length + 2];
            reader.read_exact(&mut value).await.expect("read value");
            value.truncate(length);
            Some((String::from_utf8(value).expect("a token"), cas))
        }
        _ => panic!("memcached answered {line:?}"),
    }
}

// ---------------------------------------------------------------------------
// A server that is not the memcached the store needs.

/// A scripted server that answers as memcached `version` would for the
/// commands the store sends at connect: its `VERSION` line, and a bare `EN`
/// for every `mg` (the probe's key is never there).
async fn fake_memcached(version: &'static str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let mut lines = BufReader::new(read).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let reply = if line == "version" {
                        format!("VERSION {version}\r\n")
                    } else if line.starts_with("mg ") {
                        "EN\r\n".to_owned()
                    } else {
                        "ERROR\r\n".to_owned()
                    };
                    if write.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// Memcached 1.6.0 to 1.6.9 answer the meta `mg` the store used to probe
/// with, but not the `ms <key> <datalen>` syntax, the `b` flag or the `HD`
/// replies the store relies on, so their replies fall out of step with the
/// requests; 1.6.10 to 1.6.12 compare a delete's CAS against zero, so no
/// release ever succeeds. A store must refuse them all at connect, saying
/// which version it found and which it needs, not fail later in ways that
/// look like contention.
#[tokio::test]
async fn a_memcached_too_old_for_the_meta_protocol_is_refused_at_connect() {
    for version in ["1.6.9", "1.6.0", "1.6.12", "1.5.22"] {
        let addr = fake_memcached(version).await;
        let connected = tokio::time::timeout(
            HANG_GUARD,
            MemcachedStore::connect(&format!("memcache://{addr}")),
        )
        .await
        .expect("connect answers promptly");
        let error = match connected {
            Ok(store) => panic!("memcached {version} was accepted: {store:?}"),
            Err(error) => error.chain().to_string(),
        };
        assert!(
            error.contains(&format!("memcached {version}")),
            "{version}: the error names the version found: {error}"
        );
        assert!(
            error.contains("1.6.13 or later"),
            "{version}: the error names the version needed: {error}"
        );
        assert!(
            error.contains("1.6.10"),
            "{version}: the error says where the meta protocol begins: {error}"
        );
    }
}

/// A server that answers `version` as memcached 1.6.21 does, and then
/// answers `stats settings` (or, with `at_version`, `version` itself) with
/// bytes that never end a reply: one line without an end, or STAT lines
/// without an `END`. It writes until the client hangs up.
async fn endless_memcached(at_version: bool, lines: bool) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let mut commands = BufReader::new(read).lines();
                while let Ok(Some(command)) = commands.next_line().await {
                    let endless = if command == "version" && !at_version {
                        if write.write_all(b"VERSION 1.6.21\r\n").await.is_err() {
                            return;
                        }
                        continue;
                    } else {
                        command == "version" || command == "stats settings"
                    };
                    if !endless {
                        return;
                    }
                    let chunk: Vec<u8> = if lines {
                        b"STAT item_size_max 1048576\r\n".repeat(2048)
                    } else {
                        vec![b'V'; 64 * 1024]
                    };
                    // 64 MiB at most: far more than any reply line.
                    for _ in 0..1024 {
                        if write.write_all(&chunk).await.is_err() {
                            return;
                        }
                    }
                    return;
                }
            });
        }
    });
    addr
}

/// What a server writes at connect is read with bounds, as every reply is:
/// a `version` or `stats settings` line without an end, or `stats
/// settings` without its `END`, fails the connect at once, saying so,
/// instead of buffering the bytes until the connect timeout. Before the
/// fix: each was read until the timeout, and the error said only that.
#[tokio::test]
async fn a_server_that_never_ends_its_connect_replies_is_refused_at_once() {
    for (at_version, lines, says) in [
        (true, false, "longer than"),
        (false, false, "longer than"),
        (false, true, "lines"),
    ] {
        let addr = endless_memcached(at_version, lines).await;
        let url = format!("memcache://{addr}");
        let config = MemcachedConfig::new().timeout(Duration::from_secs(20));
        let started = std::time::Instant::now();
        let connected =
            tokio::time::timeout(HANG_GUARD, MemcachedStore::connect_with(&url, config))
                .await
                .expect("connect answers");
        let took = started.elapsed();
        let error = match connected {
            Ok(store) => panic!("an endless reply was taken for a server: {store:?}"),
            Err(error) => error.chain().to_string(),
        };
        assert!(
            error.contains(says),
            "at version: {at_version}, lines: {lines}: the error says what was wrong: {error}"
        );
        assert!(
            took < Duration::from_secs(10),
            "refused as the bound was passed, not at the 20 s timeout ({took:?})"
        );
    }
}

// ---------------------------------------------------------------------------
// A connection out of step.

/// What [`Tamper`] does to the next command whose name is `command`.
#[derive(Clone)]
enum Fault {
    /// Writes `stray` to the client, then forwards the command: the client
    /// reads a reply that belongs to no request of its own first.
    StrayBefore {
        command: &'static str,
        stray: String,
    },
    /// Keeps the command from the server and answers it with `forge(o)`,
    /// where `o` is the command's opaque number (`O<o>`), if it has one.
    Forge {
        command: &'static str,
        forge: fn(Option<u64>) -> String,
    },
}

impl Fault {
    fn command(&self) -> &'static str {
        match self {
            Fault::StrayBefore { command, .. } | Fault::Forge { command, .. } => command,
        }
    }
}

/// A proxy in front of memcached that reads the commands it forwards and,
/// once armed, makes one fault: the replies a desynchronised connection
/// delivers, on demand.
struct Tamper {
    addr: SocketAddr,
    fault: Arc<Mutex<Option<Fault>>>,
    connections: Arc<AtomicUsize>,
}

impl Tamper {
    async fn start(upstream: SocketAddr) -> Tamper {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let fault = Arc::new(Mutex::new(None));
        let connections = Arc::new(AtomicUsize::new(0));
        tokio::spawn({
            let fault = Arc::clone(&fault);
            let connections = Arc::clone(&connections);
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    connections.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(tamper(client, upstream, Arc::clone(&fault)));
                }
            }
        });
        Tamper {
            addr,
            fault,
            connections,
        }
    }

    fn url(&self) -> String {
        format!("memcache://{}", self.addr)
    }

    /// Makes `fault` on the next matching command (once).
    fn arm(&self, fault: Fault) {
        *self.fault.lock().expect("unpoisoned") = Some(fault);
    }

    /// Whether the armed fault has not been made yet.
    fn armed(&self) -> bool {
        self.fault.lock().expect("unpoisoned").is_some()
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// One tampered connection: replies are copied as they come; commands are
/// read one by one (with the data block of an `ms`) and forwarded, unless
/// the armed fault says otherwise.
async fn tamper(client: TcpStream, upstream: SocketAddr, fault: Arc<Mutex<Option<Fault>>>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (client_read, client_write) = client.into_split();
    let (server_read, mut server_write) = server.into_split();
    let client_write = Arc::new(AsyncMutex::new(client_write));
    let downward = tokio::spawn({
        let client_write = Arc::clone(&client_write);
        async move {
            let mut server_read = server_read;
            let mut buffer = vec![0u8; 16 * 1024];
            while let Ok(read) = server_read.read(&mut buffer).await {
                if read == 0 {
                    break;
                }
                let mut to = client_write.lock().await;
                if to.write_all(&buffer[..read]).await.is_err() {
                    break;
                }
            }
            let _ = client_write.lock().await.shutdown().await;
        }
    });
    let mut from = BufReader::new(client_read);
    loop {
        let mut command = Vec::new();
        match from.read_until(b'\n', &mut command).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&command).into_owned();
        let words: Vec<&str> = text.split_whitespace().collect();
        if words.first() == Some(&"ms") {
            let length: usize = words.get(2).and_then(|w| w.parse().ok()).unwrap_or(0);
            let mut data = vec![0u8; length + 2];
            if from.read_exact(&mut data).await.is_err() {
                break;
            }
            command.extend_from_slice(&data);
        }
        let opaque = words
            .iter()
            .find_map(|word| word.strip_prefix('O'))
            .and_then(|digits| digits.parse().ok());
        let made = {
            let mut armed = fault.lock().expect("unpoisoned");
            match armed.as_ref() {
                Some(f) if words.first() == Some(&f.command()) => armed.take(),
                _ => None,
            }
        };
        match made {
            Some(Fault::StrayBefore { stray, .. }) => {
                let mut to = client_write.lock().await;
                if to.write_all(stray.as_bytes()).await.is_err() {
                    break;
                }
            }
            Some(Fault::Forge { forge, .. }) => {
                let mut to = client_write.lock().await;
                if to.write_all(forge(opaque).as_bytes()).await.is_err() {
                    break;
                }
                continue;
            }
            None => {}
        }
        if server_write.write_all(&command).await.is_err() {
            break;
        }
    }
    downward.abort();
}

/// A reply that belongs to nobody (left over from a command the client gave
/// up on, or sent twice by a confused server) arrives just before the answer
/// to an add on a lock someone else holds. Read in order, it says `HD`:
/// "stored", and two callers would hold the lock at once. The store must see
/// that the reply is not its add's (the meta protocol's opaque), fail the
/// call, drop the connection, and go on correctly on a new one.
#[tokio::test]
async fn a_stray_reply_before_an_add_is_never_taken_as_the_grant() {
    let Some(server) = memcached::start() else {
        return;
    };
    let prefix = unique("stray");
    let direct = LockManager::new(one_connection(&memcached::url(&server)).await)
        .with_prefix(prefix.clone());
    let tamper = Tamper::start(SocketAddr::from(([127, 0, 0, 1], server.port))).await;
    let tampered = LockManager::new(one_connection(&tamper.url()).await).with_prefix(prefix);
    let holder = direct
        .lock("job", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("the lock is free");
    let before = tamper.connections();

    tamper.arm(Fault::StrayBefore {
        command: "ms",
        stray: "HD\r\n".to_owned(),
    });
    let attempt = tokio::time::timeout(HANG_GUARD, tampered.lock("job", LONG).acquire())
        .await
        .expect("the attempt ends promptly");
    assert!(!tamper.armed(), "the stray reply was sent");
    match &attempt {
        Ok(Some(guard)) => panic!(
            "a stray reply was taken as the grant: {} and {} both hold the lock",
            holder.token(),
            guard.token()
        ),
        Ok(None) => panic!("the stray reply was not seen at all"),
        Err(error) => assert!(
            error.chain().to_string().contains("out of step"),
            "the error says the connection was out of step: {}",
            error.chain()
        ),
    }
    drop(attempt);

    let held = tampered
        .lock("job", LONG)
        .holder()
        .await
        .expect("the store answers again")
        .expect("still held");
    assert_eq!(
        held.token(),
        holder.token(),
        "the first holder still holds it"
    );
    assert!(
        tamper.connections() > before,
        "the out-of-step connection was replaced by a new one"
    );
    let again = tampered
        .lock("job", LONG)
        .acquire()
        .await
        .expect("acquire on the new connection");
    assert!(again.is_none(), "and the lock is reported held, correctly");
    assert!(holder.release().await.expect("release"), "the holder's own");
}

/// A forged reply, from the opaque of the request it stands in for.
type Forge = fn(Option<u64>) -> String;

/// A release reads the lease, then deletes it under the CAS it read. If the
/// delete's reply is really another request's (here forged: the server
/// never sees the delete), a store reading replies in order reports a
/// release that did not happen, and the caller moves on believing the lock
/// is free while the lease stays for its full TTL. The store must fail the
/// call instead (the outcome is unknown to it), and a retry on a new
/// connection must release for real.
#[tokio::test]
async fn a_release_answered_with_another_requests_reply_is_an_error_not_a_release() {
    let Some(server) = memcached::start() else {
        return;
    };
    let forgeries: [(&str, Forge); 2] = [
        ("a reply without an opaque", |_| "HD\r\n".to_owned()),
        ("the previous request's reply", |opaque| {
            format!("HD O{}\r\n", opaque.map_or(1, |o| o.saturating_sub(1)))
        }),
    ];
    for (what, forge) in forgeries {
        let prefix = unique("forged");
        let tamper = Tamper::start(SocketAddr::from(([127, 0, 0, 1], server.port))).await;
        let store = one_connection(&tamper.url()).await;
        let locks = LockManager::new(store.clone()).with_prefix(prefix);
        let guard = locks
            .lock("job", LONG)
            .acquire()
            .await
            .expect("acquire")
            .expect("the lock is free");
        let (key, token) = (guard.key().to_owned(), guard.token().to_owned());
        // The release below is the store's own, made once: the guard's
        // background retries would hide what one call reports.
        guard.keep();

        tamper.arm(Fault::Forge {
            command: "md",
            forge,
        });
        let released = tokio::time::timeout(HANG_GUARD, store.release(&key, &token))
            .await
            .expect("the release ends promptly");
        assert!(!tamper.armed(), "{what}: the delete was intercepted");
        let still = raw_item(server.port, &key).await;
        assert_eq!(
            still.as_ref().map(|(held, _)| held.as_str()),
            Some(token.as_str()),
            "{what}: the server never deleted the lease"
        );
        match released {
            Ok(true) => panic!("{what}: a release the server never made was reported as done"),
            Ok(false) => panic!("{what}: the lease was reported as not ours, yet it is"),
            Err(error) => assert!(
                error.chain().to_string().contains("out of step"),
                "{what}: the error says the connection was out of step: {}",
                error.chain()
            ),
        }
        let retried = tokio::time::timeout(HANG_GUARD, store.release(&key, &token))
            .await
            .expect("the retry ends promptly")
            .expect("the retry is answered, on a new connection");
        assert!(retried, "{what}: the retry releases the lease");
        assert_eq!(
            raw_item(server.port, &key).await,
            None,
            "{what}: and it is gone from the server"
        );
    }
}

// ---------------------------------------------------------------------------
// A release or extend that straddles a restart.

/// Which write a straddling call makes.
#[derive(Clone, Copy, Debug)]
enum Straddled {
    Release,
    Extend,
}

/// A release (or extend) reads the lease and its CAS, then writes under
/// that CAS. Memcached's CAS counter starts again after a restart, so if
/// the server restarts between the read and the write, and the lock's next
/// holder makes the same number of writes, its item has the very CAS the
/// stale call read: a compare on the CAS alone deletes (or takes over) the
/// new holder's lease. The timeline this test makes:
///
/// ```text
/// A holds the lock          CAS 1 (the fresh server's first write)
/// A reads: "A's, CAS 1"     the reply is held back by a proxy
/// memcached restarts        (empty; its CAS counter starts again)
/// B takes the lock          CAS 1 again
/// A's reply arrives; A's connection is found closed and reopened
/// A writes under CAS 1      must not touch B's lease
/// ```
async fn a_call_straddling_a_restart_leaves_the_new_holder_alone(call: Straddled) {
    let Some(mut server) = memcached::start() else {
        return;
    };
    let prefix = unique("straddle");
    let proxy = Proxy::start(&format!("127.0.0.1:{}", server.port))
        .await
        .expect("proxy");
    let stale =
        LockManager::new(one_connection(&proxy.url("memcache")).await).with_prefix(prefix.clone());
    let a = stale
        .lock("job", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("the lock is free");
    let key = a.key().to_owned();
    let (_, a_cas) = raw_item(server.port, &key).await.expect("A's lease");

    // A's read reaches memcached; its reply is held back: first by the
    // delay, then by the stall set while it is delayed.
    proxy.set_delay(Duration::from_secs(5));
    let straddling = tokio::spawn(async move {
        match call {
            Straddled::Release => a.release().await,
            Straddled::Extend => a.extend(LONG).await,
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.stall();
    proxy.set_delay(Duration::ZERO);
    // Queued behind the read on A's only connection: it is what finds the
    // connection closed once the reply arrives, so that the write after the
    // read goes out on a new connection, to the new server.
    let bystander = tokio::spawn({
        let stale = stale.clone();
        async move { stale.lock("bystander", LONG).holder().await }
    });

    server.restart(memcached::ready).expect("restart memcached");
    let fresh = LockManager::new(one_connection(&memcached::url(&server)).await)
        .with_prefix(prefix.clone());
    let b = fresh
        .lock("job", LONG)
        .acquire()
        .await
        .expect("acquire after the restart")
        .expect("the restarted server is empty");
    let (_, b_cas) = raw_item(server.port, &key).await.expect("B's lease");
    assert_eq!(
        a_cas, b_cas,
        "the premise: B's lease has the CAS A read before the restart"
    );

    proxy.resume();
    let outcome = tokio::time::timeout(HANG_GUARD, straddling)
        .await
        .expect("the straddling call ends promptly")
        .expect("no panic");
    let _ = tokio::time::timeout(HANG_GUARD, bystander).await;
    let now = raw_item(server.port, &key).await;
    assert_eq!(
        now.as_ref().map(|(token, _)| token.as_str()),
        Some(b.token()),
        "{call:?}: B's lease is intact, still B's"
    );
    assert_eq!(
        now.map(|(_, cas)| cas),
        Some(b_cas),
        "{call:?}: and nothing rewrote it"
    );
    assert!(
        matches!(outcome, Ok(false)),
        "{call:?}: the stale holder is told the lease is no longer its own: {outcome:?}"
    );
    assert!(b.release().await.expect("release"), "B releases its own");
}

/// See [`a_call_straddling_a_restart_leaves_the_new_holder_alone`].
#[tokio::test]
async fn a_release_straddling_a_restart_leaves_the_new_holders_lease() {
    a_call_straddling_a_restart_leaves_the_new_holder_alone(Straddled::Release).await;
}

/// See [`a_call_straddling_a_restart_leaves_the_new_holder_alone`].
#[tokio::test]
async fn an_extend_straddling_a_restart_does_not_take_over_the_new_holders_lease() {
    a_call_straddling_a_restart_leaves_the_new_holder_alone(Straddled::Extend).await;
}

// ---------------------------------------------------------------------------
// A server without CAS.

/// Memcached started with `-C` keeps no CAS: every item reads as CAS 0, and
/// a delete under `C0` deletes whatever is there. A release would then
/// compare nothing (a stale holder deletes the next holder's lease), and a
/// store that refused only its releases would strand every lease it took.
/// The store must refuse the server at connect, and say why.
#[tokio::test]
async fn a_memcached_without_cas_is_refused_at_connect() {
    let Some(server) = memcached::start_with(&["-C"]) else {
        return;
    };
    let refused = MemcachedStore::connect(&memcached::url(&server)).await;
    let error = match refused {
        Ok(_) => panic!("a memcached without CAS was accepted"),
        Err(error) => error.chain().to_string(),
    };
    assert!(
        error.contains("-C"),
        "the error names the setting to change: {error}"
    );
}
