//! The Redis store over TLS (`rediss://`, feature `redis-tls`), against a
//! redis-server this test starts with a certificate it makes.

use std::sync::OnceLock;
use std::time::Duration;

use lock_core::{ConnectOptions, LockManager, RedisConfig, RedisStore, Tls};
use lock_tests::certs::Certificates;
use lock_tests::harness::{self, RedisServer};

/// Leases must work the same over an encrypted connection, release
/// notifications included (the subscription runs over TLS too), with the
/// CA and client certificate given by the URL's words, by `RedisConfig::tls`
/// or by `ConnectOptions::tls`; a wrong CA and a missing client certificate
/// are refused at connect, saying which.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_and_wakeups_work_over_tls() {
    if !harness::redis_server_installed() {
        harness::unavailable::<()>("the TLS test", "redis-server is not on PATH");
        return;
    }
    let certs = Certificates::make().expect("certificates");
    let tls_port = harness::free_port().expect("a free port").to_string();
    let text = Certificates::text;
    let (cert, key, ca) = (
        text(&certs.server_cert),
        text(&certs.server_key),
        text(&certs.ca),
    );
    let (client_cert, client_key) = (text(&certs.client_cert), text(&certs.client_key));
    let server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "yes",
    ])
    .expect("redis-server with TLS");

    let base = format!("rediss://127.0.0.1:{tls_port}");
    let url = format!("{base}?sslrootcert={ca}&sslcert={client_cert}&sslkey={client_key}");
    let store = RedisStore::connect(&url)
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

    // The same certificates through the configuration and the options.
    let tls = Tls::new()
        .ca_file(&certs.ca)
        .client_cert_file(&certs.client_cert, &certs.client_key);
    RedisStore::connect_with(&base, RedisConfig::new().tls(tls.clone()))
        .await
        .expect("RedisConfig::tls");
    lock_core::connect_with(&base, ConnectOptions::new().tls(tls))
        .await
        .expect("ConnectOptions::tls");

    let refused = |url: String| async move {
        let error =
            RedisStore::connect_with(&url, RedisConfig::new().timeout(Duration::from_secs(3)))
                .await
                .err()
                .unwrap_or_else(|| panic!("{url} connected"));
        error.chain().to_string()
    };
    // The webpki roots do not vouch for this CA.
    let why = refused(format!("{base}?sslcert={client_cert}&sslkey={client_key}")).await;
    assert!(why.contains("sslrootcert"), "names the CA: {why}");
    let other = text(&certs.other_ca);
    let why = refused(format!(
        "{base}?sslrootcert={other}&sslcert={client_cert}&sslkey={client_key}"
    ))
    .await;
    assert!(why.contains("sslrootcert"), "names the CA: {why}");
    let why = refused(format!("{base}?sslrootcert={ca}")).await;
    assert!(
        why.contains("client certificate"),
        "names the client certificate: {why}"
    );
    assert!(!why.contains("PRIVATE KEY"), "{why}");

    // Words that only a single server takes are refused elsewhere.
    let cluster = format!("rediss+cluster://127.0.0.1:{tls_port}?sslrootcert={ca}");
    let why = lock_core::connect(&cluster)
        .await
        .expect_err("refused")
        .chain()
        .to_string();
    assert!(why.contains("one Redis server only"), "{why}");
    drop(server);
}

/// The TLS server shared by the contract suite: client certificates
/// required, reached with the CA and the client certificate in the URL.
fn shared_url() -> Option<&'static str> {
    static SHARED: OnceLock<Option<String>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            if !harness::redis_server_installed() {
                return harness::unavailable(
                    "the Redis TLS contract suite",
                    "redis-server is not on PATH",
                );
            }
            let certs = Certificates::make().expect("certificates");
            let port = harness::free_port().expect("a free port").to_string();
            let text = Certificates::text;
            let server = RedisServer::start_with(&[
                "--tls-port",
                &port,
                "--tls-cert-file",
                &text(&certs.server_cert),
                "--tls-key-file",
                &text(&certs.server_key),
                "--tls-ca-cert-file",
                &text(&certs.ca),
                "--tls-auth-clients",
                "yes",
            ])
            .expect("redis-server with TLS");
            let url = format!(
                "rediss://127.0.0.1:{port}?sslrootcert={}&sslcert={}&sslkey={}",
                text(&certs.ca),
                text(&certs.client_cert),
                text(&certs.client_key)
            );
            // Kept for the process's life; the certificates go when it ends.
            std::mem::forget(server);
            std::mem::forget(
                lock_tests::kept::KeptDir::new(certs.dir.clone())
                    .expect("the certificates' remover"),
            );
            std::mem::forget(certs);
            Some(url)
        })
        .as_deref()
}

/// The store contract suite over TLS, client certificate and all.
mod contract {
    async fn manager() -> Option<lock_core::LockManager> {
        let url = super::shared_url()?;
        Some(lock_core::LockManager::new(
            lock_core::RedisStore::connect(url)
                .await
                .unwrap_or_else(|e| panic!("connecting over TLS: {e}")),
        ))
    }

    lock_test_kit::store_contract!(manager());
}
