//! The Redis store over TLS (`rediss://`, feature `redis-tls`), against a
//! redis-server this test starts with a certificate it makes.

use std::time::Duration;

use lock_core::{LockManager, RedisConfig, RedisStore};
use lock_tests::certs::Certificates;
use lock_tests::harness::{self, RedisServer};

/// Leases must work the same over an encrypted connection, release
/// notifications included (the subscription runs over TLS too), and the
/// store must reach a server that only its own CA vouches for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_and_wakeups_work_over_tls() {
    if !harness::redis_server_installed() {
        harness::unavailable::<()>("the TLS test", "redis-server is not on PATH");
        return;
    }
    let certs = Certificates::make().expect("certificates");
    let ca = std::fs::read(&certs.ca).expect("the CA");
    let tls_port = harness::free_port().expect("a free port").to_string();
    let (cert, key, ca_file) = (
        Certificates::text(&certs.server_cert),
        Certificates::text(&certs.server_key),
        Certificates::text(&certs.ca),
    );
    let server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca_file,
        "--tls-auth-clients",
        "no",
    ])
    .expect("redis-server with TLS");

    let url = format!("rediss://127.0.0.1:{tls_port}");
    let client = redis::Client::build_with_tls(
        url.as_str(),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(ca),
        },
    )
    .expect("a TLS client");
    let store = RedisStore::from_client(client, RedisConfig::new())
        .await
        .expect("the store connects over TLS");
    let locks = LockManager::new(store);

    let lock = locks.lock("over-tls", Duration::from_secs(30));
    let held = lock.acquire().await.expect("acquire").expect("free");
    assert!(
        lock.acquire().await.expect("acquire").is_none(),
        "held over TLS as anywhere"
    );
    let waiter = {
        let lock = lock.clone().wait_for(Duration::from_secs(20));
        tokio::spawn(async move { lock.acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(held.release().await.expect("release"), "our own lease");
    let woken = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken by the release message, not the 30 s ttl")
        .expect("task ran")
        .expect("acquire");
    assert!(woken.is_some(), "the waiter got the lock");

    // The webpki roots do not vouch for this CA: a plain `connect` must fail
    // with an error, not hang or panic.
    let refused =
        RedisStore::connect_with(&url, RedisConfig::new().timeout(Duration::from_secs(2))).await;
    assert!(refused.is_err(), "an unknown CA is refused");

    drop(server);
}
