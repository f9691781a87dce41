//! What the suites do not reach: the request connection when the server
//! goes silent or a call is cut off, wakeups across stores, and URLs.

use std::time::Duration;

use lock_core::store::{AcquireRequest, LockStore};
use lock_core::{Error, LockManager};
use lock_store_example::{MapConfig, MapServer, MapStore};
use tokio::time::Instant;

/// A TTL no test outlives.
const LONG: Duration = Duration::from_secs(60);

/// The store's own bound in these tests.
const TIMEOUT: Duration = Duration::from_millis(300);

/// Far above anything a correct store needs: only a hang guard.
const HANG_GUARD: Duration = Duration::from_secs(10);

async fn server_and_store() -> (MapServer, MapStore) {
    let server = MapServer::start().await.expect("start a map server");
    let config = MapConfig::new().timeout(TIMEOUT);
    let store = MapStore::connect_with(&server.url(), config)
        .await
        .expect("connect");
    assert_eq!(
        server.clients(),
        1,
        "connecting opened the request connection"
    );
    (server, store)
}

// A silent server must fail the call at the store's timeout, not hang the
// caller; and the connection the silent call used must not serve the next
// call, or the late answer to the first would be read as the second's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_to_a_server_that_stops_answering_fails_within_the_timeout_and_the_next_call_uses_a_fresh_connection()
 {
    let (server, store) = server_and_store().await;
    server.pause();
    let started = Instant::now();
    let silent = tokio::time::timeout(
        HANG_GUARD,
        store.acquire(AcquireRequest::new("silent", "token-1", LONG)),
    )
    .await
    .expect("the store's own timeout ends the call");
    let waited = started.elapsed();
    let error = silent.expect_err("no answer is an error");
    assert!(
        matches!(
            error,
            Error::Store {
                operation: "acquire",
                ..
            }
        ),
        "a store error for the acquire: {error:?}"
    );
    let message = error.chain().to_string();
    assert!(
        message.contains("no answer within") && message.contains("MapConfig::timeout"),
        "says it timed out and which setting to raise: {message}"
    );
    assert!(waited >= TIMEOUT, "it waited the timeout first: {waited:?}");

    // The held acquire is now carried out and answered, on the old
    // connection, to nobody.
    server.resume();
    let other = store.holder("other").await.expect("the next call works");
    assert!(
        other.is_none(),
        "the next call got its own answer: {other:?}"
    );
    assert_eq!(
        server.clients(),
        2,
        "on a fresh connection: the silent call's was thrown away"
    );
    assert_eq!(
        store
            .holder("silent")
            .await
            .expect("holder")
            .map(|h| h.token().to_owned()),
        Some("token-1".to_owned()),
        "a call that timed out may still have been carried out"
    );
}

// A caller's timeout or a lost `select!` drops an acquire while its request
// is on the wire: its connection must go with it, or the acquire's late
// reply would answer the next request on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_future_dropped_mid_request_does_not_return_its_connection_to_the_slot() {
    let (server, store) = server_and_store().await;
    server.pause();
    let cut = tokio::time::timeout(
        TIMEOUT / 3,
        store.acquire(AcquireRequest::new("cut", "token-1", LONG)),
    )
    .await;
    assert!(cut.is_err(), "cut off while the server held its request");
    server.resume();
    let released = store
        .release("elsewhere", "token-2")
        .await
        .expect("the next call works");
    assert!(!released, "its own answer: nothing to release");
    assert_eq!(
        server.clients(),
        2,
        "the dropped acquire's connection was thrown away, not put back"
    );
    let again = store.holder("elsewhere").await.expect("holder");
    assert!(again.is_none(), "{again:?}");
    assert_eq!(
        server.clients(),
        2,
        "a call that finished puts its connection back"
    );
}

// Waiters in one process are woken by releases made in another: the
// subscription hears every release on the server, not only this store's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_through_another_store_wakes_a_waiter() {
    let server = MapServer::start().await.expect("start");
    let here = LockManager::new(MapStore::connect(&server.url()).await.expect("connect"));
    let there = LockManager::new(MapStore::connect(&server.url()).await.expect("connect"));
    let held = there
        .lock("shared", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let waiter = tokio::spawn(async move {
        here.lock("shared", LONG)
            .wait_for(Duration::from_secs(30))
            .acquire()
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "the waiter waits while it is held");
    assert!(held.release().await.expect("release"), "released");
    let got = tokio::time::timeout(HANG_GUARD, waiter)
        .await
        .expect("woken by the release, not at the holder's 60 s ttl")
        .expect("task ran")
        .expect("acquire");
    assert!(got.is_some(), "the waiter got the lock");
}

// A URL is shown in errors and logs: never with its password.
#[tokio::test]
async fn a_url_that_is_not_map_host_port_is_refused_without_showing_its_password() {
    for url in [
        "redis://127.0.0.1:6379",
        "map://user:hunter2@127.0.0.1:7070",
    ] {
        let refused = MapStore::connect(url).await.expect_err(url);
        assert!(
            matches!(refused, Error::InvalidUrl { .. }),
            "{url}: {refused:?}"
        );
        let shown = refused.chain().to_string();
        assert!(shown.contains("map://"), "says the form: {shown}");
        assert!(!shown.contains("hunter2"), "no password: {shown}");
    }
}

// A server that is not there fails the connect, within the timeout.
#[tokio::test]
async fn connecting_to_a_stopped_server_is_an_error() {
    let server = MapServer::start().await.expect("start");
    let url = server.url();
    server.stop().await;
    let config = MapConfig::new().timeout(TIMEOUT);
    let refused = tokio::time::timeout(HANG_GUARD, MapStore::connect_with(&url, config))
        .await
        .expect("bounded")
        .expect_err("nobody listens");
    assert!(
        matches!(refused, Error::Store { .. }),
        "a store error: {refused:?}"
    );
}
