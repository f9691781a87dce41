//! The PostgreSQL store over TLS (feature `postgres-tls`), against a
//! cluster of the test's own that takes only TLS connections
//! (`lock_tests::postgres_tls`): a connection that works at all went over
//! TLS, the `LISTEN` connection and the cancel requests included.

use std::sync::OnceLock;
use std::time::Duration;

use lock_core::{Error, LockManager, PostgresConfig, PostgresStore, Tls};
use lock_tests::postgres_tls::TlsPostgres;

/// The cluster shared by this binary's PostgreSQL TLS tests.
fn shared() -> Option<&'static TlsPostgres> {
    static SHARED: OnceLock<Option<TlsPostgres>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            let server = TlsPostgres::start()?;
            // Kept for the process's life: its certificates go when it ends.
            std::mem::forget(
                lock_tests::kept::KeptDir::new(server.certs().dir.clone())
                    .expect("the certificates' remover"),
            );
            Some(server)
        })
        .as_ref()
}

/// `sslmode=verify-full` with the cluster's CA, as user `postgres`.
fn verified_url(server: &TlsPostgres) -> String {
    let ca = server.certs().ca.display();
    server.url(
        "postgres",
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    )
}

/// The text of a failed connect, its whole chain.
async fn refused(url: &str, config: PostgresConfig) -> String {
    match PostgresStore::connect_with(url, config.timeout(Duration::from_secs(5))).await {
        Ok(_) => panic!("{url} connected"),
        Err(error) => {
            assert!(matches!(error, Error::Store { .. }), "{error:?}");
            error.chain().to_string()
        }
    }
}

mod contract {
    async fn manager() -> Option<lock_core::LockManager> {
        let server = super::shared()?;
        let url = super::verified_url(server);
        Some(lock_core::LockManager::new(
            lock_core::PostgresStore::connect(&url)
                .await
                .unwrap_or_else(|e| panic!("connecting over TLS: {e}")),
        ))
    }

    lock_test_kit::store_contract!(manager());
}

/// Without `sslmode` or certificates a connection is plain, whatever
/// features are built (enabling `postgres-tls` changes no existing URL):
/// this server takes none, and says to ask for TLS. `prefer` takes the TLS
/// it offers.
#[tokio::test]
async fn without_sslmode_the_store_connects_plain_and_prefer_takes_tls() {
    let Some(server) = shared() else { return };
    let plain = refused(
        &server.url("postgres", "127.0.0.1", "application_name=locks"),
        PostgresConfig::new(),
    )
    .await;
    assert!(
        plain.contains("no encryption") && plain.contains("sslmode=verify-full"),
        "refused, saying to ask for TLS: {plain}"
    );
    let url = server.url("postgres", "127.0.0.1", "sslmode=prefer");
    let store = PostgresStore::connect(&url)
        .await
        .expect("prefer finds TLS");
    let locks = LockManager::new(store);
    let held = locks
        .lock("prefer", Duration::from_secs(10))
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    held.release().await.expect("release");
}

/// `verify-full` checks that the certificate names the host dialled;
/// `verify-ca` only that the CA signed it. The certificate names 127.0.0.1
/// and localhost, not 127.0.0.2, where the server also listens.
#[tokio::test]
async fn verify_full_checks_the_host_and_verify_ca_only_the_ca() {
    let Some(server) = shared() else { return };
    let ca = server.certs().ca.display();
    for host in ["127.0.0.1", "localhost"] {
        let url = server.url(
            "postgres",
            host,
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        );
        PostgresStore::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("{host} is named by the certificate: {e}"));
    }
    let elsewhere = |mode: &str| {
        server.url(
            "postgres",
            "127.0.0.2",
            &format!("sslmode={mode}&sslrootcert={ca}"),
        )
    };
    let why = refused(&elsewhere("verify-full"), PostgresConfig::new()).await;
    assert!(
        why.contains("does not name the host"),
        "the cause, in words to act on: {why}"
    );
    PostgresStore::connect(&elsewhere("verify-ca"))
        .await
        .expect("verify-ca checks only the chain");
    // libpq: `require` with a CA checks the chain as `verify-ca` does.
    PostgresStore::connect(&elsewhere("require"))
        .await
        .expect("require with a CA");
}

/// A CA that did not sign the server's certificate is refused at connect,
/// and the message names the cause and the setting to change.
#[tokio::test]
async fn a_wrong_ca_is_refused_at_connect_saying_so() {
    let Some(server) = shared() else { return };
    let other = server.certs().other_ca.display();
    // libpq checks the chain whenever it has a CA, `prefer` included; a
    // check that fails is an error, never a fall back to plain.
    for mode in ["verify-full", "verify-ca", "require", "prefer"] {
        let url = server.url(
            "postgres",
            "127.0.0.1",
            &format!("sslmode={mode}&sslrootcert={other}"),
        );
        let why = refused(&url, PostgresConfig::new()).await;
        assert!(
            why.contains("not signed by a CA this client trusts") && why.contains("sslrootcert"),
            "{mode}: {why}"
        );
    }
    // Without a CA given, the public ones (`sslrootcert=system`): they do
    // not know this one either.
    let url = server.url(
        "postgres",
        "127.0.0.1",
        "sslmode=verify-full&sslrootcert=system",
    );
    let why = refused(&url, PostgresConfig::new()).await;
    assert!(why.contains("sslrootcert"), "{why}");
    // A CA given and no mode: the chain is checked.
    let url = server.url("postgres", "127.0.0.1", &format!("sslrootcert={other}"));
    let why = refused(&url, PostgresConfig::new()).await;
    assert!(
        why.contains("not signed by a CA this client trusts"),
        "{why}"
    );
}

/// User `locks` is let in only with a client certificate the CA signed:
/// given in the URL or through `PostgresConfig::tls`, it works; without
/// one, connecting fails saying a client certificate is wanted.
#[tokio::test]
async fn a_client_certificate_lets_its_user_in_and_its_absence_is_named() {
    let Some(server) = shared() else { return };
    let certs = server.certs();
    let (ca, cert, key) = (
        certs.ca.display(),
        certs.client_cert.display(),
        certs.client_key.display(),
    );
    let without = server.url(
        "locks",
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    let why = refused(&without, PostgresConfig::new()).await;
    assert!(
        why.contains("client certificate") && why.contains("sslcert"),
        "the cause, in words to act on: {why}"
    );
    let with = format!("{without}&sslcert={cert}&sslkey={key}");
    let locks = LockManager::new(PostgresStore::connect(&with).await.expect("in the URL"));
    let held = locks
        .lock("by-certificate", Duration::from_secs(10))
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    held.release().await.expect("release");
    let configured = PostgresConfig::new().tls(Tls::new().ca_file(&certs.ca).client_cert_pem(
        std::fs::read(&certs.client_cert).expect("cert"),
        std::fs::read(&certs.client_key).expect("key"),
    ));
    PostgresStore::connect_with(
        &server.url("locks", "127.0.0.1", "sslmode=verify-full"),
        configured,
    )
    .await
    .expect("through PostgresConfig::tls");
}

/// An application's own pool of TLS connections to `server`, each
/// checking the server's certificate against its CA.
fn application_pool(server: &TlsPostgres) -> deadpool_postgres::Pool {
    let ca = std::fs::read(&server.certs().ca).expect("the CA");
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(&ca) {
        roots.add(cert.expect("PEM")).expect("a CA");
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut pg = tokio_postgres::Config::new();
    pg.host("127.0.0.1")
        .port(server.port())
        .user("postgres")
        .dbname("postgres")
        .ssl_mode(tokio_postgres::config::SslMode::Require);
    let manager = deadpool_postgres::Manager::from_config(
        pg,
        tokio_postgres_rustls::MakeRustlsConnect::new(client),
        deadpool_postgres::ManagerConfig::default(),
    );
    deadpool_postgres::Pool::builder(manager)
        .max_size(4)
        .build()
        .expect("a pool")
}

/// `from_pool`: the application's own TLS pool, and the store's `LISTEN`
/// connection over TLS from the listen URL's words. A waiter woken by a
/// release well before the holder's TTL shows the notification arrived
/// (plain connections are refused, so it came over TLS).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_pool_listens_over_tls_too() {
    let Some(server) = shared() else { return };
    let pool = application_pool(server);
    let store = PostgresStore::from_pool(pool, &verified_url(server), PostgresConfig::new())
        .await
        .expect("the store over the application's pool");
    let locks = LockManager::new(store);
    let lock = locks.lock("from-pool", Duration::from_secs(30));
    let held = lock.acquire().await.expect("acquire").expect("free");
    let waiter = {
        let lock = lock.clone().wait_for(Duration::from_secs(20));
        tokio::spawn(async move { lock.acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.expect("release");
    let woken = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken by the NOTIFY, not the 30 s TTL")
        .expect("task")
        .expect("acquire");
    assert!(woken.is_some());
}

/// Neither the store's `Debug`, nor a configuration's, nor any error or
/// log line shows the URL's password or the client key.
#[test]
fn no_password_or_key_shows_in_debug_errors_or_logs() {
    let Some(server) = shared() else { return };
    let certs = server.certs();
    let key = std::fs::read_to_string(&certs.client_key).expect("key");
    let secret_line = certs.key_line();
    let config = PostgresConfig::new().tls(Tls::new().client_cert_pem(
        std::fs::read(&certs.client_cert).expect("cert"),
        key.clone(),
    ));
    let (captured, _guard) = lock_tests::logs::Captured::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut shown = vec![format!("{config:?}")];
    runtime.block_on(async {
        let ca = certs.ca.display();
        let url = format!(
            "postgres://postgres:hunter2@127.0.0.1:{}/postgres?sslmode=verify-full&sslrootcert={ca}",
            server.port()
        );
        let store = PostgresStore::connect_with(&url, config.clone())
            .await
            .expect("connects");
        shown.push(format!("{store:?}"));
        let locks = LockManager::new(store);
        let held = locks
            .lock("quiet", Duration::from_secs(5))
            .acquire()
            .await
            .expect("acquire")
            .expect("free");
        held.release().await.expect("release");
        let wrong = url.replace(&ca.to_string(), &certs.other_ca.display().to_string());
        let error = PostgresStore::connect_with(&wrong, config.clone())
            .await
            .expect_err("a wrong CA");
        shown.push(format!("{error:?}"));
        shown.push(error.chain().to_string());
    });
    shown.extend(captured.lines());
    for text in &shown {
        assert!(!text.contains("hunter2"), "a password shown: {text}");
        assert!(!text.contains(&secret_line), "the key shown: {text}");
    }
}

/// A client certificate renewed in its files is what the next connection
/// the store opens presents, as libpq reads them at each connection: a
/// store outlives the certificate it started with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_client_certificate_is_used_by_the_next_connection() {
    let Some(server) = shared() else { return };
    let certs = server.certs();
    let (cert, key) = certs
        .another_client("locks", "rotating-1")
        .expect("a client certificate");
    let url = server.url(
        "locks",
        "127.0.0.1",
        &format!(
            "sslmode=verify-full&sslrootcert={}&sslcert={}&sslkey={}&application_name=rotation",
            certs.ca.display(),
            cert.display(),
            key.display()
        ),
    );
    let store = PostgresStore::connect_with(&url, PostgresConfig::new().pool_size(1))
        .await
        .expect("connects");
    let locks = LockManager::new(store);
    let lock = locks.lock("rotation", Duration::from_secs(5));
    // The first calls after the connections are cut may find theirs dead.
    let works = || async {
        for _ in 0..50 {
            if let Ok(Some(held)) = lock.acquire().await {
                held.release().await.expect("release");
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the store never connected again");
    };
    works().await;
    let serials = || {
        server
            .query(
                "SELECT string_agg(DISTINCT s.client_serial::text, ',') FROM pg_stat_ssl s \
                 JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'rotation'",
            )
            .expect("pg_stat_ssl")
    };
    let before = serials();
    assert!(
        !before.is_empty() && !before.contains(','),
        "one certificate: {before}"
    );

    let (renewed_cert, renewed_key) = certs
        .another_client("locks", "rotating-2")
        .expect("a renewal");
    std::fs::copy(&renewed_cert, &cert).expect("renew the certificate");
    std::fs::copy(&renewed_key, &key).expect("renew the key");
    server
        .query(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = 'rotation'",
        )
        .expect("cut the store's connections");
    works().await;
    let after = serials();
    assert!(
        !after.is_empty() && !after.split(',').any(|serial| serial == before),
        "the new connections present the renewed certificate: {before} then {after}"
    );
}

/// How many of the store's statements on `schema`'s lease table wait for a
/// lock on `server`: cut off, and not cancelled (the acquire's, and the
/// sweep's as it comes round).
fn still_waiting(server: &TlsPostgres, schema: &str) -> usize {
    let count = server
        .query(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
             AND query LIKE '%{schema}%' AND pid <> pg_backend_pid()"
        ))
        .expect("pg_stat_activity");
    count
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("a count: {count:?}"))
}

/// With `from_pool`, cancel requests connect as the listen URL says, like
/// every connection of the store: a statement cut off on one of the
/// application's TLS connections is cancelled over TLS checked against the
/// listen URL's CA. A listen URL without `sslmode` asks for no TLS, and
/// the store's rule for that is "plain", never "TLS that checks nothing":
/// the cancel request, which carries the connection's cancel key, is not
/// sent to a server it cannot check (it was, over TLS that took any
/// certificate), and the statement is left to run its course.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_pool_cancels_over_tls_only_as_checked_as_the_listen_url_asks() {
    let Some(server) = shared() else { return };
    // The LISTEN connection of the store whose listen URL asks for no TLS
    // goes to a server that takes plain connections.
    let Some(plain) = lock_tests::postgres::postgres_url() else {
        return;
    };
    let timeout = Duration::from_millis(500);
    for (listen_url, cancelled) in [(verified_url(server), true), (plain, false)] {
        let schema = format!("cancel_{:08x}", rand::random::<u32>());
        let pool = application_pool(server);
        let config = PostgresConfig::new()
            .schema(schema.clone())
            .timeout(timeout)
            .prepared_statements(false);
        let store = PostgresStore::from_pool(pool.clone(), &listen_url, config)
            .await
            .unwrap_or_else(|e| panic!("the store over the pool, listening at {listen_url}: {e}"));
        let locks = LockManager::new(store);
        // A migration holds the lease table: the acquire's statement waits.
        let migration = pool.get().await.expect("a connection of the pool");
        migration
            .batch_execute(&format!(
                "BEGIN; LOCK TABLE \"{schema}\".lock_leases IN ACCESS EXCLUSIVE MODE"
            ))
            .await
            .expect("BEGIN; LOCK TABLE");
        let cut = tokio::time::timeout(
            Duration::from_millis(100),
            locks.lock("cut-off", Duration::from_secs(30)).acquire(),
        )
        .await;
        assert!(cut.is_err(), "the caller drops the blocked acquire");
        // The acquire's own statement: the first to wait on the table (the
        // store's sweep may come to wait behind it later).
        let first = server
            .query(&format!(
                "SELECT pid || ' ' || query_start FROM pg_stat_activity \
                 WHERE wait_event_type = 'Lock' AND query LIKE '%{schema}%' \
                 AND pid <> pg_backend_pid() ORDER BY query_start LIMIT 1"
            ))
            .expect("pg_stat_activity");
        let (pid, started) = first
            .trim()
            .split_once(' ')
            .unwrap_or_else(|| panic!("the cut-off acquire's statement waits: {first:?}"));
        // Past the call's deadline, when its statement is cancelled.
        let mut looked = 0;
        let waiting = loop {
            tokio::time::sleep(timeout).await;
            let waiting = still_waiting(server, &schema);
            looked += 1;
            if waiting == 0 || !cancelled || looked == 40 {
                break waiting;
            }
        };
        if cancelled {
            assert_eq!(
                waiting, 0,
                "a listen URL with the CA (verify-full): the statement is cancelled over \
                 checked TLS"
            );
        } else {
            tokio::time::sleep(timeout * 4).await;
            // That very statement, not another that came to wait since (the
            // sweep's, cut off in their turn, wait too).
            let same = server
                .query(&format!(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                     AND pid = {pid} AND query_start = '{started}'"
                ))
                .expect("pg_stat_activity");
            assert_eq!(
                same.trim(),
                "1",
                "a listen URL without sslmode: no cancel request goes over TLS that checks \
                 nothing, so the acquire's statement (pid {pid}) still waits"
            );
        }
        migration.batch_execute("ROLLBACK").await.expect("ROLLBACK");
    }
}
