//! [`connect`]: any store from a URL, through one table of schemes.

#[cfg(test)]
mod config_errors;
#[cfg(test)]
mod never_shown;
mod options;
mod schemes;

pub use self::options::ConnectOptions;

use crate::store::kit::{redacted, scheme, scrub_all, secrets};
use crate::{Error, LockManager, Result};

/// Connects to the store `url` names, with each store's defaults: a
/// [`LockManager`] over it, under the default prefix (change it with
/// [`with_prefix`](LockManager::with_prefix)).
///
/// The URL's scheme picks the store, so an application can take its store
/// from configuration alone (`LOCK_URL=redis://cache:6379`, the variable
/// the `locks` operator tool reads too), and every program that reads
/// such a URL (the application, the `locks` operator tool, a test's child
/// process) reads it the same way. Without one table,
/// each would match schemes of its own, and they drift: one knows
/// `redis+sentinel://` and another sends it to the wrong store, one hides
/// the password in its errors and another prints it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// use std::time::Duration;
///
/// let locks = lock_core::connect("memory://").await?.with_prefix("billing:");
/// let ran = locks
///     .lock("invoice-run", Duration::from_secs(60))
///     .run(async { Ok::<_, lock_core::Error>("sent") })
///     .await?;
/// assert_eq!(ran, Some("sent"));
/// assert!(!locks.is_shared(), "memory:// is this process's store");
/// # Ok(()) }
/// ```
///
/// With a server, at startup:
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// let url = std::env::var("LOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
/// let locks = lock_core::connect(&url).await?;
/// lock_core::registry::install(locks)?;
/// # Ok(()) }
/// ```
///
/// # Schemes
///
/// | scheme | store | feature | the rest of the URL |
/// |---|---|---|---|
/// | `memory://` | this process's `MemoryStore`: every `memory://` manager of one process shares it, as every `redis://` one shares a server | always built | nothing |
/// | `redis://`, `rediss://` (TLS), `redis+unix://`, `unix://` | `RedisStore::connect_with`, one server | `redis` (TLS: `redis-tls`) | `[user:password@]host[:port][/db]`, or the socket's path |
/// | several of those, separated by commas | `RedisStore::cluster_with`, a cluster through these seed nodes | `redis` | `redis://host:port,redis://host:port` |
/// | `redis+cluster://`, `rediss+cluster://` (TLS) | the same | `redis` | `[user:password@]host:port[,host:port...]` |
/// | `redis+sentinel://`, `rediss+sentinel://` (TLS) | `RedisStore::connect_with`, the primary behind Sentinel | `redis` | `[user:password@]sentinel[:port][,sentinel[:port]...]/service[?db=N&sentinel_password=...]` |
/// | `memcache://`, `memcached://`, `memcaches://` (TLS) | `MemcachedStore` | `memcached` (TLS: `memcached-tls`) | `host[:port]`, without credentials; with `memcaches://`, `[?sslrootcert=PATH][&sslcert=PATH&sslkey=PATH]` |
/// | `postgres://`, `postgresql://` | `PostgresStore` | `postgres` | `[user[:password]@]host[:port][/database][?setting=value...]` |
/// | `etcd://`, `http://`, `https://` | `EtcdStore` | `etcd` | `[user:password@]host:port[,host:port...]` (`etcd://` speaks `http://`); or the members' URLs separated by commas |
///
/// Schemes are matched whatever their case, and spaces around the URL are
/// ignored. Each store's constructor documents its URL in full.
///
/// # Settings
///
/// The URL says where the store is; how to use it (time bounds, the
/// PostgreSQL table, Redis's replica acknowledgements...) comes from
/// [`ConnectOptions`], through [`connect_with`].
///
/// # Secrets
///
/// A URL's passwords (`user:password@`, `?sentinel_password=`, Redis's
/// `?pass=`, PostgreSQL's `password=`) never appear in the errors this
/// returns. Every store reads its URL with one reader
/// (`store::kit::StoreUrl`, with the `store-kit` feature: the user info runs to the
/// last `@` before the first `/`, so a password may hold `@`, `:`, `?`,
/// `,` unescaped), and a URL is shown read by that same reader, with `***`
/// in each password's place; a URL it cannot read is not shown, beyond its
/// scheme. Any cause that quotes a password (a client library's error) is
/// scrubbed of it. The stores' `Debug` output shows hosts and ports only.
///
/// # Errors
///
/// - [`Error::InvalidUrl`] when `url` has no scheme or one no store takes
///   (the message lists the schemes this build takes), or is malformed for
///   its store (a cluster URL without nodes, `memory://` with a host...);
/// - [`Error::StoreNotBuilt`] when its store's cargo feature is off (the
///   message names the feature);
/// - [`Error::InvalidConfig`] when the store's configuration cannot work
///   (a TLS file that is missing, a PostgreSQL channel or table name the
///   store refuses...): its message says what to change;
/// - [`Error::Store`] when the server cannot be reached, or refuses the
///   connection, within the time bound: worth retrying.
pub async fn connect(url: &str) -> Result<LockManager> {
    connect_with(url, ConnectOptions::new()).await
}

/// Connects to the store `url` names, set up with `options`: see
/// [`connect`] for the schemes.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// use std::time::Duration;
/// use lock_core::ConnectOptions;
///
/// let url = std::env::var("LOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
/// let options = ConnectOptions::new().timeout(Duration::from_secs(1));
/// let locks = lock_core::connect_with(&url, options).await?.with_prefix("billing:");
/// # let _ = locks;
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// As [`connect`].
pub async fn connect_with(url: &str, options: ConnectOptions) -> Result<LockManager> {
    let url = url.trim();
    let open = schemes::resolve(url)?;
    // Each store reads its scheme lowercased, as the table matched it.
    let url = match scheme(url) {
        Some((scheme, rest)) if !url.starts_with(&*scheme) => format!("{scheme}://{rest}"),
        _ => url.to_owned(),
    };
    open(&url, options)
        .await
        .map_err(|error| scrubbed(error, &url))
}

/// `error`, or, when its messages, causes or `Debug` output quote any of
/// `url`'s secrets (as the stores read it), the same error with each
/// secret replaced by `***` (its causes then kept as text). A last line:
/// the stores show URLs [`redacted`], and this catches a client library's
/// error that quotes what it was handed.
fn scrubbed(error: Error, url: &str) -> Error {
    let secrets = secrets(url);
    let shown = format!("{}\n{error:?}", error.chain());
    if !secrets.iter().any(|secret| shown.contains(secret.as_str())) {
        return error;
    }
    let scrub = |text: &str| scrub_all(text, &secrets);
    match error {
        Error::Store {
            operation,
            key,
            source,
        } => {
            let mut causes = source.to_string();
            let mut cause = source.source();
            while let Some(next) = cause {
                causes.push_str(": ");
                causes.push_str(&next.to_string());
                cause = next.source();
            }
            Error::Store {
                operation,
                key: scrub(&key),
                source: scrub(&causes).into(),
            }
        }
        Error::InvalidUrl { url, reason } => Error::InvalidUrl {
            url: scrub(&url),
            reason: scrub(&reason),
        },
        Error::InvalidConfig { store, reason } => Error::InvalidConfig {
            store,
            reason: scrub(&reason),
        },
        // No other kind of error holds text from a URL: were one to, it
        // is still told as a problem with the URL, never as an outage.
        other => Error::InvalidUrl {
            url: redacted(url),
            reason: scrub(&other.chain().to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The table, `connect`'s docs and the `locks` tool's README (the
    // operators' list of schemes) list the same schemes: a scheme added to
    // the table and not to the docs is one nobody knows of, and one in the
    // docs and not in the table fails whoever reads them.
    #[test]
    fn the_docs_and_the_cli_readme_list_every_scheme_of_the_table() {
        let docs = include_str!("mod.rs");
        let readme = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../lock-cli/README.md"
        ))
        // Not in a packaged crate, which has no lock-cli beside it.
        .unwrap_or_default();
        for (scheme, _) in schemes::schemes() {
            let written = format!("`{scheme}://`");
            assert!(
                docs.contains(&written),
                "{written} missing from connect's docs"
            );
            if !readme.is_empty() {
                assert!(
                    readme.contains(&written),
                    "{written} missing from lock-cli/README.md"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_memory_url_connects_whatever_its_case_and_spaces() {
        let locks = connect("  Memory://\n").await.expect("memory://");
        assert!(!locks.is_shared(), "a memory store is per process");
        assert_eq!(locks.prefix(), crate::DEFAULT_PREFIX);
    }

    // A client library's error may quote the URL it was given: whatever
    // `connect` returns must not carry the password on to a log.
    #[test]
    fn an_error_that_quotes_a_password_is_scrubbed_and_one_that_does_not_is_kept() {
        let url = "redis://admin:hunter2@cache:6379";
        let quoting = Error::store(
            "connect",
            "redis://admin:hunter2@cache:6379",
            std::io::Error::other("auth hunter2 refused"),
        );
        let clean = scrubbed(quoting, url);
        let shown = format!("{}\n{clean:?}", clean.chain());
        assert!(!shown.contains("hunter2"), "password shown: {shown}");
        assert!(
            shown.contains("auth *** refused"),
            "the cause, as text: {shown}"
        );

        let plain = Error::store(
            "connect",
            "cache:6379",
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused"),
        );
        let kept = scrubbed(plain, url);
        let source = std::error::Error::source(&kept).expect("a cause");
        assert!(
            source.downcast_ref::<std::io::Error>().is_some(),
            "an error without secrets keeps its typed cause: {kept:?}"
        );
    }

    #[tokio::test]
    async fn an_unknown_scheme_fails_before_any_connection_without_the_password() {
        let error = connect("ftp://user:topsecret@host/")
            .await
            .expect_err("no store takes ftp://");
        let text = error.to_string();
        assert!(text.contains("redis://"), "lists the schemes: {text}");
        assert!(
            !format!("{text}{error:?}").contains("topsecret"),
            "{error:?}"
        );
    }
}
