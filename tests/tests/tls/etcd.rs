//! The etcd store over TLS (`https://`, feature `etcd-tls`), against a
//! member this binary starts once with certificates it makes, asking every
//! client for a certificate (`--client-cert-auth`): the store contract
//! suite over TLS, and a wrong CA or a missing client certificate refused
//! at connect with a message that names the cause.

use std::sync::OnceLock;
use std::time::Duration;

use lock_core::{ConnectOptions, EtcdConfig, EtcdStore, LockManager, Tls};
use lock_tests::certs::{Certificates, openssl_installed};
use lock_tests::kept::KeptDir;

/// The TLS member shared by this binary, and the certificates it was
/// started with.
struct Member {
    certs: Certificates,
    /// `https://127.0.0.1:<port>`.
    url: String,
}

/// The shared member, started on first use and left running until the
/// process ends (its watchdog then stops it, and the certificates' own
/// removes them); `None` (after the notice) when etcd or openssl is
/// missing.
fn member() -> Option<&'static Member> {
    static SHARED: OnceLock<Option<Member>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            if !openssl_installed() {
                // Says so, and fails under CI=true.
                return lock_tests::harness::unavailable(
                    "the etcd TLS tests",
                    "openssl is not on PATH (apt-get install openssl)",
                );
            }
            let certs = Certificates::make().expect("certificates");
            let server = lock_tests::etcd::start_tls(&certs)?;
            let url = format!("https://127.0.0.1:{}", server.port);
            // Both live until the process ends; their watchdogs then remove
            // the member and the certificates.
            std::mem::forget(server);
            std::mem::forget(KeptDir::new(certs.dir.clone()).expect("the certificates' remover"));
            Some(Member { certs, url })
        })
        .as_ref()
}

/// What the member trusts: its CA, and the client certificate it signed.
fn trusted(certs: &Certificates) -> Tls {
    Tls::new()
        .ca_file(&certs.ca)
        .client_cert_file(&certs.client_cert, &certs.client_key)
}

/// A manager over a fresh store on the shared member, over TLS.
async fn manager() -> Option<LockManager> {
    let member = member()?;
    let store = EtcdStore::connect_with(
        &[member.url.as_str()],
        EtcdConfig::new().tls(trusted(&member.certs)),
    )
    .await
    .unwrap_or_else(|e| panic!("connecting to {} over TLS: {}", member.url, e.chain()));
    Some(LockManager::new(store))
}

mod contract {
    lock_test_kit::store_contract!(super::manager());
}

/// A short bound, so that a refused connection fails fast.
fn quick() -> EtcdConfig {
    EtcdConfig::new().timeout(Duration::from_secs(3))
}

/// The whole text of a failed connect, its causes included, checked for
/// key material on the way.
fn refused(result: lock_core::Result<EtcdStore>, certs: &Certificates) -> String {
    let Err(error) = result else {
        panic!("the connection was expected to be refused");
    };
    assert!(
        matches!(error, lock_core::Error::Store { .. }),
        "a store error: {error:?}"
    );
    let text = error.chain().to_string();
    eprintln!("refused: {text}");
    for key in [&certs.client_key, &certs.server_key] {
        let pem = std::fs::read_to_string(key).expect("a key");
        let body = pem.lines().nth(1).expect("a key's first line of base64");
        assert!(!text.contains(body), "key material in the error: {text}");
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_signed_by_another_ca_is_refused_naming_the_ca() {
    let Some(member) = member() else { return };
    let certs = &member.certs;
    let wrong = Tls::new()
        .ca_file(&certs.other_ca)
        .client_cert_file(&certs.client_cert, &certs.client_key);
    let text = refused(
        EtcdStore::connect_with(&[member.url.as_str()], quick().tls(wrong)).await,
        certs,
    );
    assert!(
        text.contains("not signed by a CA this client trusts") && text.contains("sslrootcert"),
        "the message names the CA: {text}"
    );

    // Without a CA of its own the store trusts only the public CAs, which
    // do not vouch for this one either.
    let text = refused(
        EtcdStore::connect_with(&[member.url.as_str()], quick()).await,
        certs,
    );
    assert!(
        text.contains("not signed by a CA this client trusts"),
        "the message names the CA: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_client_certificate_is_refused_naming_the_client_certificate() {
    let Some(member) = member() else { return };
    let certs = &member.certs;
    let text = refused(
        EtcdStore::connect_with(
            &[member.url.as_str()],
            quick().tls(Tls::new().ca_file(&certs.ca)),
        )
        .await,
        certs,
    );
    assert!(
        text.contains("client certificate") && text.contains("sslcert"),
        "the message names the client certificate: {text}"
    );
}

/// The URL's words reach the store, win over the options' `tls`, and give
/// a working connection; `Debug` of the options and of the configuration
/// shows where the certificates are, never a key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_url_words_and_the_options_give_the_certificates() {
    let Some(member) = member() else { return };
    let certs = &member.certs;
    let url = format!(
        "{}?sslrootcert={}&sslcert={}&sslkey={}",
        member.url,
        Certificates::text(&certs.ca),
        Certificates::text(&certs.client_cert),
        Certificates::text(&certs.client_key)
    );
    // The options name the wrong CA: the URL's wins.
    let options = ConnectOptions::new()
        .timeout(Duration::from_secs(3))
        .tls(Tls::new().ca_file(&certs.other_ca));
    let locks = lock_core::connect_with(&url, options.clone())
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {}", e.chain()));
    let guard = locks
        .lock("tls-url", Duration::from_secs(10))
        .acquire()
        .await
        .expect("acquire over TLS")
        .expect("free");
    assert!(guard.release().await.expect("release"));

    // The options alone (no words) with the member's URL.
    let options = ConnectOptions::new()
        .timeout(Duration::from_secs(3))
        .tls(trusted(certs));
    let locks = lock_core::connect_with(&member.url, options)
        .await
        .unwrap_or_else(|e| panic!("connecting with ConnectOptions::tls: {}", e.chain()));
    assert!(
        locks
            .lock("tls-options", Duration::from_secs(10))
            .acquire()
            .await
            .expect("acquire over TLS")
            .is_some()
    );

    // Words on a plain etcd:// URL are refused, saying to write https://.
    let plain = format!(
        "etcd://127.0.0.1:2379?sslrootcert={}",
        Certificates::text(&certs.ca)
    );
    let error = lock_core::connect(&plain)
        .await
        .expect_err("etcd:// is plain");
    assert!(error.to_string().contains("https://"), "{error}");
}

#[test]
fn debug_shows_no_key_bytes() {
    let secret =
        "-----BEGIN PRIVATE KEY-----\nc2VjcmV0IGtleSBieXRlcw==\n-----END PRIVATE KEY-----\n";
    let tls = Tls::new()
        .ca_pem("-----BEGIN CERTIFICATE-----\nQ0E=\n-----END CERTIFICATE-----\n")
        .client_cert_pem(
            "-----BEGIN CERTIFICATE-----\nQ0VSVA==\n-----END CERTIFICATE-----\n",
            secret,
        );
    let config = EtcdConfig::new().user("locks", "hunter2").tls(tls.clone());
    let options = ConnectOptions::new().tls(tls).etcd(config.clone());
    for shown in [format!("{config:?}"), format!("{options:?}")] {
        assert!(!shown.contains("c2VjcmV0"), "key bytes shown: {shown}");
        assert!(!shown.contains("PRIVATE KEY"), "key shown: {shown}");
        assert!(!shown.contains("hunter2"), "password shown: {shown}");
        assert!(shown.contains("bytes of PEM"), "the Tls is shown: {shown}");
    }
}

/// No log line, from a store that connects and works over TLS or from one
/// refused, shows the client key (given in memory here) or a password.
#[test]
fn no_log_line_shows_a_key() {
    let Some(member) = member() else { return };
    let certs = &member.certs;
    let key = std::fs::read_to_string(&certs.client_key).expect("key");
    let secret = certs.key_line();
    let tls = Tls::new()
        .ca_file(&certs.ca)
        .client_cert_pem(std::fs::read(&certs.client_cert).expect("cert"), key);
    let (captured, _guard) = lock_tests::logs::Captured::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut shown = Vec::new();
    runtime.block_on(async {
        let store = EtcdStore::connect_with(&[member.url.as_str()], quick().tls(tls.clone()))
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
        let wrong = tls.clone().ca_file(&certs.other_ca);
        let error = EtcdStore::connect_with(&[member.url.as_str()], quick().tls(wrong))
            .await
            .expect_err("a wrong CA");
        shown.push(error.chain().to_string());
    });
    shown.extend(captured.lines());
    assert!(shown.len() > 1, "something was logged");
    for text in &shown {
        assert!(!text.contains(&secret), "the key shown: {text}");
        assert!(!text.contains("PRIVATE KEY"), "the key shown: {text}");
    }
}
