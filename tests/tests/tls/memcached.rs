//! memcached over TLS (`memcaches://`, feature `memcached-tls`), against a
//! memcached this binary starts with `-Z`, wanting a client certificate
//! signed by its CA (`lock_tests::memcached::memcached_tls`).

use std::time::Duration;

use lock_core::{ConnectOptions, Error, LockManager, MemcachedConfig, MemcachedStore, Tls};
use lock_tests::memcached::{TlsMemcached, memcached_tls, memcached_url};

/// A manager over a fresh store on the shared TLS memcached, reached with
/// every certificate in the URL, through `connect`'s scheme table.
async fn manager() -> Option<LockManager> {
    let url = memcached_tls()?.url();
    Some(
        lock_core::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("connecting to {url}: {}", e.chain())),
    )
}

/// The store contract, every lease over TLS.
mod contract {
    lock_test_kit::store_contract!(super::manager());
}

fn config() -> MemcachedConfig {
    MemcachedConfig::new().timeout(Duration::from_secs(5))
}

/// The text of `refused`'s error, all its causes.
fn refused(refused: lock_core::Result<impl std::fmt::Debug>) -> String {
    let error = refused.expect_err("the connect must fail");
    assert!(matches!(error, Error::Store { .. }), "{error:?}");
    error.chain().to_string()
}

fn url_with(server: &TlsMemcached, query: &str) -> String {
    format!("memcaches://127.0.0.1:{}?{query}", server.port)
}

// A CA that did not sign the server's certificate: refused in the
// handshake, and the message says to give the CA that did.
#[tokio::test]
async fn a_wrong_ca_fails_at_connect_naming_the_ca() {
    let Some(server) = memcached_tls() else {
        return;
    };
    let url = url_with(
        &server,
        &format!(
            "sslrootcert={}&sslcert={}&sslkey={}",
            server.other_ca.display(),
            server.client_cert.display(),
            server.client_key.display()
        ),
    );
    let text = refused(MemcachedStore::connect_with(&url, config()).await);
    eprintln!("a wrong CA: {text}");
    assert!(
        text.contains("not signed by a CA this client trusts") && text.contains("sslrootcert"),
        "{text}"
    );
}

// No client certificate for a server that wants one: with TLS 1.3 the
// handshake completes on the client's side and the server's refusal comes
// on the first read, which the connect makes: it must still fail there,
// naming the client certificate.
#[tokio::test]
async fn a_missing_client_certificate_fails_at_connect_naming_it() {
    let Some(server) = memcached_tls() else {
        return;
    };
    let url = url_with(&server, &format!("sslrootcert={}", server.ca.display()));
    for _ in 0..5 {
        let text = refused(MemcachedStore::connect_with(&url, config()).await);
        eprintln!("no client certificate: {text}");
        assert!(
            text.contains("client certificate") && text.contains("sslcert"),
            "{text}"
        );
    }
    let text = refused(lock_core::connect(&url).await);
    assert!(
        text.contains("client certificate"),
        "through connect: {text}"
    );
}

// The same certificates given in memory, through the configuration or
// `ConnectOptions`, connect as the URL's do; the URL's words win over both.
#[tokio::test]
async fn the_certificates_may_come_from_the_configuration_or_the_options() {
    let Some(server) = memcached_tls() else {
        return;
    };
    let read = |path: &std::path::Path| std::fs::read(path).expect("a certificate file");
    let tls = Tls::new()
        .ca_pem(read(&server.ca))
        .client_cert_pem(read(&server.client_cert), read(&server.client_key));
    let bare = format!("memcaches://127.0.0.1:{}", server.port);
    let store = MemcachedStore::connect_with(&bare, config().tls(tls.clone()))
        .await
        .expect("the configuration's certificates");
    assert!(format!("{store:?}").contains("tls: true"), "{store:?}");
    let locks = LockManager::new(store);
    let guard = locks
        .lock("tls-configured", Duration::from_secs(10))
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    assert!(guard.release().await.expect("release"));

    lock_core::connect_with(&bare, ConnectOptions::new().tls(tls.clone()))
        .await
        .expect("the options' certificates");
    // By name: the server's certificate lists `localhost` too.
    let by_name = format!("memcaches://localhost:{}", server.port);
    lock_core::connect_with(&by_name, ConnectOptions::new().tls(tls.clone()))
        .await
        .expect("a host name the certificate lists");

    // A wrong CA in the options, the right one in the URL: the URL wins.
    let wrong = tls.clone().ca_file(&server.other_ca);
    let text =
        refused(lock_core::connect_with(&bare, ConnectOptions::new().tls(wrong.clone())).await);
    assert!(text.contains("sslrootcert"), "{text}");
    let right = url_with(&server, &format!("sslrootcert={}", server.ca.display()));
    lock_core::connect_with(&right, ConnectOptions::new().tls(wrong.clone()))
        .await
        .expect("the URL's CA and the options' client certificate");
    // The options win over the configuration.
    lock_core::connect_with(
        &bare,
        ConnectOptions::new()
            .memcached(config().tls(wrong))
            .tls(tls),
    )
    .await
    .expect("the options' CA over the configuration's");
}

// A key given in memory is a secret: no Debug output, and no error about
// it, may show its bytes.
#[tokio::test]
async fn debug_output_and_errors_show_no_key_bytes() {
    let key = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n";
    let tls = Tls::new()
        .ca_file("/etc/ca.pem")
        .client_cert_pem("-----BEGIN CERTIFICATE-----\n", key);
    let config = MemcachedConfig::new().tls(tls.clone());
    let options = ConnectOptions::new().tls(tls).memcached(config.clone());
    for shown in [format!("{config:?}"), format!("{options:?}")] {
        assert!(
            !shown.contains("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"),
            "{shown}"
        );
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
        assert!(shown.contains("/etc/ca.pem"), "where the CA is: {shown}");
    }
    let unusable = Tls::new().client_cert_pem("not a certificate", key);
    let error = MemcachedStore::connect_with("memcaches://127.0.0.1:1", config.tls(unusable))
        .await
        .expect_err("an unusable certificate is refused");
    assert!(
        matches!(error, Error::InvalidConfig { .. }),
        "a configuration error, found before connecting, not an outage: {error:?}"
    );
    let text = error.chain().to_string();
    eprintln!("an unusable client certificate: {text}");
    assert!(text.contains("sslcert"), "names what is wrong: {text}");
    assert!(!text.contains("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"), "{text}");
}

// The wrong side of a TLS port: each refused with the scheme's mistake
// named, not as an unreadable version line.
#[tokio::test]
async fn a_plain_url_on_a_tls_port_and_a_tls_url_on_a_plain_one_say_so() {
    let Some(server) = memcached_tls() else {
        return;
    };
    let plain = format!("memcache://127.0.0.1:{}", server.port);
    let text = refused(MemcachedStore::connect_with(&plain, config()).await);
    eprintln!("memcache:// on a TLS port: {text}");
    assert!(text.contains("memcaches://"), "{text}");

    let Some(plain) = memcached_url() else {
        return;
    };
    let Some((_, server_part)) = plain.split_once("://") else {
        panic!("{plain} has no scheme");
    };
    let tls = format!("memcaches://{server_part}");
    let text = refused(
        MemcachedStore::connect_with(&tls, config().tls(Tls::new().ca_file(&server.ca))).await,
    );
    eprintln!("memcaches:// on a plain port: {text}");
    assert!(text.contains("did not answer in TLS"), "{text}");
}

/// No log line, from a store that connects and works over TLS or from one
/// refused, shows the client key (given in memory here).
#[test]
fn no_log_line_shows_a_key() {
    let Some(server) = memcached_tls() else {
        return;
    };
    let key = std::fs::read_to_string(&server.client_key).expect("key");
    let secret = key
        .lines()
        .find(|line| !line.starts_with("-----") && line.len() > 40)
        .expect("a line of the key")
        .to_owned();
    let tls = Tls::new()
        .ca_file(&server.ca)
        .client_cert_pem(std::fs::read(&server.client_cert).expect("cert"), key);
    let (captured, _guard) = lock_tests::logs::Captured::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let url = format!("memcaches://127.0.0.1:{}", server.port);
    let mut shown = Vec::new();
    runtime.block_on(async {
        let store = MemcachedStore::connect_with(&url, config().tls(tls.clone()))
            .await
            .expect("connects");
        let locks = LockManager::new(store);
        let held = locks
            .lock("quiet", Duration::from_secs(5))
            .acquire()
            .await
            .expect("acquire")
            .expect("free");
        held.release().await.expect("release");
        let wrong = tls.clone().ca_file(&server.other_ca);
        shown.push(refused(
            MemcachedStore::connect_with(&url, config().tls(wrong)).await,
        ));
    });
    shown.extend(captured.lines());
    for text in &shown {
        assert!(!text.contains(&secret), "the key shown: {text}");
        assert!(!text.contains("PRIVATE KEY"), "the key shown: {text}");
    }
}
