//! Tests: a configuration that cannot work (a channel, schema or table
//! the store refuses, a TLS file that is missing or is no certificate, a
//! word a URL may not hold) is told as what it is, in the error's own
//! message, and never as [`Error::Store`], which says "the store is down,
//! retry later".
//!
//! Most programs print only an error's `Display`, and retry what reads
//! like an outage: a configuration error reported as one sends the
//! operator to check the network, and the program to retry a connect that
//! can never work.

use std::time::Duration;

use super::connect_with;
use crate::{ConnectOptions, Error};

/// Nothing listens there: a configuration error must be found before any
/// connection is tried, and would otherwise show as a refused one.
#[allow(dead_code)]
const NOWHERE: &str = "127.0.0.1:1";

/// A TLS file that does not exist.
#[allow(dead_code)]
const MISSING: &str = "/nonexistent/lock-core-test/ca.pem";

/// The error of connecting to `url` with `options`.
#[allow(dead_code)]
async fn refused(url: &str, options: ConnectOptions) -> Error {
    let options = options.timeout(Duration::from_millis(300));
    match connect_with(url, options).await {
        Ok(manager) => panic!("{url} connected: {manager:?}"),
        Err(error) => error,
    }
}

/// Checks that `error` is a configuration error whose `Display` alone
/// holds each of `causes`.
#[allow(dead_code)]
fn told_as_configuration(error: &Error, causes: &[&str], what: &str) {
    assert!(
        !matches!(error, Error::Store { .. }),
        "{what}: a configuration error, not an outage to retry: {error:?}"
    );
    let message = error.to_string();
    for cause in causes {
        assert!(
            message.contains(cause),
            "{what}: the message alone names the cause ({cause}): {message}"
        );
    }
    assert!(
        !message.contains("check that the store is reachable"),
        "{what}: sends the reader to the network: {message}"
    );
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_postgres_configuration_the_store_refuses_says_why_in_its_message() {
    use crate::PostgresConfig;
    let url = format!("postgres://app@{NOWHERE}/db");
    let postgres = |config: PostgresConfig| ConnectOptions::new().postgres(config);
    for (config, causes, what) in [
        (
            PostgresConfig::new().channel(""),
            &["channel"][..],
            "an empty channel",
        ),
        (
            PostgresConfig::new().channel("c".repeat(64)),
            &["channel", "63"],
            "a channel PostgreSQL would cut",
        ),
        (
            PostgresConfig::new().schema("ops-1"),
            &["ops-1"],
            "a schema that is no identifier",
        ),
        (
            PostgresConfig::new().table("lock leases"),
            &["lock leases"],
            "a table that is no identifier",
        ),
    ] {
        told_as_configuration(&refused(&url, postgres(config)).await, causes, what);
    }
    for (url, causes, what) in [
        (
            format!("postgres://app@{NOWHERE}/db?sslmode=strict"),
            &["sslmode"][..],
            "an sslmode libpq does not know",
        ),
        (
            format!("postgres://app@{NOWHERE}/db?colour=blue"),
            &["setting number 1", "libpq"],
            "a setting libpq does not know (named by its place: it may be a password's tail)",
        ),
        (
            format!("postgres://app@{NOWHERE}/db?sslcrl=/crl.pem"),
            &["sslcrl"],
            "a setting of libpq's the store does not take",
        ),
        (
            format!("postgres://app@{NOWHERE}/db?sslmode=disable&sslrootcert=/ca.pem"),
            &["sslmode=disable"],
            "a CA with sslmode=disable",
        ),
    ] {
        told_as_configuration(&refused(&url, ConnectOptions::new()).await, causes, what);
    }
}

#[cfg(feature = "postgres-tls")]
#[tokio::test]
async fn a_postgres_tls_file_that_does_not_exist_is_named_in_the_message() {
    let url = format!("postgres://app@{NOWHERE}/db?sslmode=verify-full&sslrootcert={MISSING}");
    let error = refused(&url, ConnectOptions::new()).await;
    told_as_configuration(&error, &[MISSING, "could not read"], "a missing CA file");
    let given = ConnectOptions::new().tls(crate::Tls::new().ca_file(MISSING));
    let url = format!("postgres://app@{NOWHERE}/db?sslmode=verify-full");
    told_as_configuration(
        &refused(&url, given).await,
        &[MISSING],
        "a missing Tls CA file",
    );
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_redis_url_the_store_refuses_says_why_in_its_message() {
    for (url, causes, what) in [
        (
            format!("redis://{NOWHERE}/not-a-db"),
            &["database"][..],
            "a database that is no number",
        ),
        (
            format!("redis+sentinel://{NOWHERE}/main?db=x"),
            &["db"],
            "a Sentinel database that is no number",
        ),
        (
            format!("redis+sentinel://{NOWHERE}/main?colour=blue"),
            &["colour"],
            "a Sentinel setting that does not exist",
        ),
        (
            format!("redis+cluster://{NOWHERE}?sslrootcert=/ca.pem"),
            &["Redis Cluster"],
            "a CA for a cluster",
        ),
    ] {
        told_as_configuration(&refused(&url, ConnectOptions::new()).await, causes, what);
    }
}

#[cfg(feature = "redis-tls")]
#[tokio::test]
async fn a_redis_tls_file_that_does_not_exist_is_named_in_the_message() {
    let url = format!("rediss://{NOWHERE}?sslrootcert={MISSING}");
    let error = refused(&url, ConnectOptions::new()).await;
    told_as_configuration(&error, &[MISSING, "could not read"], "a missing CA file");
}

#[cfg(feature = "memcached")]
#[tokio::test]
async fn a_memcached_url_the_store_refuses_says_why_in_its_message() {
    for (url, causes, what) in [
        (
            format!("memcache://app:pw@{NOWHERE}"),
            &["authentication"][..],
            "credentials",
        ),
        (
            format!("memcache://{NOWHERE},127.0.0.1:2"),
            &["one server"],
            "two servers",
        ),
        (
            format!("memcache://{NOWHERE}?sslrootcert=/ca.pem"),
            &["memcaches://"],
            "a CA without TLS",
        ),
    ] {
        told_as_configuration(&refused(&url, ConnectOptions::new()).await, causes, what);
    }
}

#[cfg(feature = "memcached-tls")]
#[tokio::test]
async fn a_memcached_tls_file_that_does_not_exist_is_named_in_the_message() {
    let url = format!("memcaches://{NOWHERE}?sslrootcert={MISSING}");
    let error = refused(&url, ConnectOptions::new()).await;
    told_as_configuration(&error, &[MISSING, "could not read"], "a missing CA file");
}

#[cfg(feature = "etcd")]
#[tokio::test]
async fn an_etcd_url_the_store_refuses_says_why_in_its_message() {
    for (url, causes, what) in [
        (format!("etcd://{NOWHERE}/keys"), &["path"][..], "a path"),
        (
            format!("http://{NOWHERE}?sslrootcert=/ca.pem"),
            &["https://"],
            "a CA over http",
        ),
        (
            format!("http://{NOWHERE},https://127.0.0.1:2"),
            &["mix"],
            "http and https members",
        ),
    ] {
        told_as_configuration(&refused(&url, ConnectOptions::new()).await, causes, what);
    }
}

#[cfg(feature = "etcd-tls")]
#[tokio::test]
async fn an_etcd_tls_file_that_does_not_exist_is_named_in_the_message() {
    let url = format!("https://{NOWHERE}?sslrootcert={MISSING}");
    let error = refused(&url, ConnectOptions::new()).await;
    told_as_configuration(&error, &[MISSING, "could not read"], "a missing CA file");
}
