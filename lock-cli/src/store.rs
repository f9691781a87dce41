//! From a URL to a connected store: the scheme picks it, and nothing that
//! reaches the terminal ever carries the URL's password.

use std::time::Duration;

use lock_core::LockManager;

/// What `--url` can be, for the help text and for errors.
pub(crate) const SCHEMES: &str = "redis://, rediss://, redis+cluster:// (or several redis:// URLs separated by commas), redis+sentinel://sentinel,sentinel/service (rediss+sentinel:// for TLS), memcache://, postgres://, etcd:// (or http://)";

/// Store settings the command line can change.
pub(crate) struct Settings {
    /// Each call's time bound.
    #[cfg_attr(
        not(any(
            feature = "redis",
            feature = "memcached",
            feature = "postgres",
            feature = "etcd"
        )),
        expect(dead_code, reason = "read by the stores this build has")
    )]
    pub(crate) timeout: Duration,
    /// PostgreSQL: the schema of the lease table, when the application set one.
    #[cfg_attr(
        not(feature = "postgres"),
        expect(dead_code, reason = "read by the PostgreSQL store")
    )]
    pub(crate) pg_schema: Option<String>,
    /// PostgreSQL: the lease table's name, when the application changed it.
    #[cfg_attr(
        not(feature = "postgres"),
        expect(dead_code, reason = "read by the PostgreSQL store")
    )]
    pub(crate) pg_table: Option<String>,
}

/// The passwords in `url` (every `user:password@` part, and any
/// `...password=` setting in its query, as a Sentinel URL's
/// `sentinel_password`), so that any text about to be printed can be
/// scrubbed of them, whatever produced it.
pub(crate) fn secrets(url: &str) -> Vec<String> {
    let (url, query) = url.split_once('?').unwrap_or((url, ""));
    let in_query = query.split('&').filter_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        (name.ends_with("password") && !value.is_empty()).then(|| value.to_owned())
    });
    url.split(',')
        .filter_map(|part| {
            let rest = part.split_once("://").map_or(part, |(_, rest)| rest);
            let userinfo = &rest[..rest.rfind('@')?];
            // `user@host` carries no password; only `user:password@`.
            let (_, password) = userinfo.split_once(':')?;
            (!password.is_empty()).then(|| password.to_owned())
        })
        .chain(in_query)
        .collect()
}

/// `text` with every secret replaced by `***`.
pub(crate) fn scrub(text: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .fold(text.to_owned(), |text, secret| text.replace(secret, "***"))
}

/// `url` as it may be shown: without any password.
pub(crate) fn shown(url: &str) -> String {
    scrub(url, &secrets(url))
}

/// Connects to the store `url` names, under `prefix`.
pub(crate) async fn connect(
    url: &str,
    prefix: &str,
    settings: &Settings,
) -> Result<LockManager, String> {
    let url = url.trim();
    let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
    let connected = match scheme {
        "redis" | "rediss" | "redis+unix" | "unix" if url.contains(',') => {
            redis_cluster(&url.split(',').map(str::trim).collect::<Vec<_>>(), settings).await
        }
        "redis" | "rediss" | "redis+unix" | "unix" => redis(url, settings).await,
        // The sentinels, then the service: the store finds the primary.
        "redis+sentinel" | "rediss+sentinel" => redis(url, settings).await,
        "redis+cluster" | "rediss+cluster" => {
            let plain = if scheme == "rediss+cluster" {
                "rediss"
            } else {
                "redis"
            };
            let nodes = cluster_nodes(url, plain)?;
            redis_cluster(
                &nodes.iter().map(String::as_str).collect::<Vec<_>>(),
                settings,
            )
            .await
        }
        "memcache" | "memcached" => memcached(url, settings).await,
        "postgres" | "postgresql" => postgres(url, settings).await,
        "etcd" | "http" | "https" => etcd(url, settings).await,
        _ => Err(format!(
            "`{}` is not a store URL this command knows; use one of {SCHEMES}",
            shown(url)
        )),
    }?;
    Ok(connected.with_prefix(prefix))
}

/// `redis+cluster://[user:password@]host:port,host:port` as one URL per node,
/// each with the credentials.
fn cluster_nodes(url: &str, scheme: &str) -> Result<Vec<String>, String> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let (credentials, hosts) = match rest.rfind('@') {
        Some(at) => (&rest[..=at], &rest[at + 1..]),
        None => ("", rest),
    };
    let nodes: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|host| !host.is_empty())
        .map(|host| format!("{scheme}://{credentials}{host}"))
        .collect();
    if nodes.is_empty() {
        return Err(
            "a cluster URL names no node; use redis+cluster://host:port[,host:port...]".to_owned(),
        );
    }
    Ok(nodes)
}

#[cfg(feature = "redis")]
async fn redis(url: &str, settings: &Settings) -> Result<LockManager, String> {
    let config = lock_core::RedisConfig::new().timeout(settings.timeout);
    let store = lock_core::RedisStore::connect_with(url, config)
        .await
        .map_err(|e| crate::chain(&e))?;
    Ok(LockManager::new(store))
}

#[cfg(feature = "redis")]
async fn redis_cluster(urls: &[&str], settings: &Settings) -> Result<LockManager, String> {
    let config = lock_core::RedisConfig::new().timeout(settings.timeout);
    let store = lock_core::RedisStore::cluster_with(urls, config)
        .await
        .map_err(|e| crate::chain(&e))?;
    Ok(LockManager::new(store))
}

#[cfg(not(feature = "redis"))]
async fn redis(_: &str, _: &Settings) -> Result<LockManager, String> {
    Err(not_built("Redis", "redis"))
}

#[cfg(not(feature = "redis"))]
async fn redis_cluster(_: &[&str], _: &Settings) -> Result<LockManager, String> {
    Err(not_built("Redis", "redis"))
}

#[cfg(feature = "memcached")]
async fn memcached(url: &str, settings: &Settings) -> Result<LockManager, String> {
    let config = lock_core::MemcachedConfig::new().timeout(settings.timeout);
    let store = lock_core::MemcachedStore::connect_with(url, config)
        .await
        .map_err(|e| crate::chain(&e))?;
    Ok(LockManager::new(store))
}

#[cfg(not(feature = "memcached"))]
async fn memcached(_: &str, _: &Settings) -> Result<LockManager, String> {
    Err(not_built("memcached", "memcached"))
}

#[cfg(feature = "postgres")]
async fn postgres(url: &str, settings: &Settings) -> Result<LockManager, String> {
    // Never create tables from an operator's tool: a missing table means the
    // URL, schema or table name is not the application's.
    let mut config = lock_core::PostgresConfig::new()
        .timeout(settings.timeout)
        .create_table(false)
        .pool_size(2);
    if let Some(schema) = &settings.pg_schema {
        config = config.schema(schema.clone());
    }
    if let Some(table) = &settings.pg_table {
        config = config.table(table.clone());
    }
    let store = lock_core::PostgresStore::connect_with(url, config)
        .await
        .map_err(|e| {
            let text = crate::chain(&e);
            if text.contains("does not exist") {
                format!(
                    "{text}\nno lease table there: give the database, --pg-schema and --pg-table the application's PostgresConfig uses"
                )
            } else {
                text
            }
        })?;
    Ok(LockManager::new(store))
}

#[cfg(not(feature = "postgres"))]
async fn postgres(_: &str, _: &Settings) -> Result<LockManager, String> {
    Err(not_built("PostgreSQL", "postgres"))
}

/// `etcd://[user:password@]host:port[,host:port...]`, or `http(s)://` member
/// URLs separated by commas.
#[cfg(feature = "etcd")]
async fn etcd(url: &str, settings: &Settings) -> Result<LockManager, String> {
    let mut config = lock_core::EtcdConfig::new().timeout(settings.timeout);
    let mut endpoints = Vec::new();
    for part in url.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (scheme, rest) = part.split_once("://").unwrap_or(("http", part));
        let scheme = if scheme == "etcd" { "http" } else { scheme };
        let rest = match rest.rfind('@') {
            Some(at) => {
                let (user, password) = rest[..at].split_once(':').unwrap_or((&rest[..at], ""));
                config = config.user(user, password);
                &rest[at + 1..]
            }
            None => rest,
        };
        endpoints.push(format!("{scheme}://{}", rest.trim_end_matches('/')));
    }
    let store = lock_core::EtcdStore::connect_with(&endpoints, config)
        .await
        .map_err(|e| crate::chain(&e))?;
    Ok(LockManager::new(store))
}

#[cfg(not(feature = "etcd"))]
async fn etcd(_: &str, _: &Settings) -> Result<LockManager, String> {
    Err(not_built("etcd", "etcd"))
}

#[allow(dead_code, reason = "used only when a store's feature is off")]
fn not_built(store: &str, feature: &str) -> String {
    format!(
        "this `locks` was built without {store} support; rebuild lock-cli with the `{feature}` feature"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_found_in_every_url_of_a_list_and_scrubbed() {
        let url = "redis+cluster://admin:hunter2@10.0.0.1:6379,10.0.0.2:6379";
        assert_eq!(secrets(url), ["hunter2"]);
        let list = "redis://:s3cret@a:1,redis://u:other@b:2,redis://c:3";
        assert_eq!(secrets(list), ["s3cret", "other"]);
        let message = "could not reach redis://u:other@b:2 (auth other failed)";
        let scrubbed = scrub(message, &secrets(list));
        assert!(!scrubbed.contains("other"), "{scrubbed}");
        assert_eq!(
            shown("postgres://app:pw@db/test"),
            "postgres://app:***@db/test"
        );
        assert_eq!(shown("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        let sentinel = "redis+sentinel://:data@s1:26379,s2:26379/mymaster?sentinel_password=watch";
        assert_eq!(secrets(sentinel), ["data", "watch"]);
        assert!(
            secrets("postgres://postgres@db/test").is_empty(),
            "a user name alone is no secret (scrubbing it would mangle every message)"
        );
    }

    #[test]
    fn a_cluster_url_becomes_one_url_per_node_with_the_credentials() {
        assert_eq!(
            cluster_nodes("redis+cluster://u:p@a:1, b:2", "redis").expect("nodes"),
            ["redis://u:p@a:1", "redis://u:p@b:2"]
        );
        assert!(cluster_nodes("redis+cluster://", "redis").is_err());
    }
}
