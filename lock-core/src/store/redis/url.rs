//! Redis URLs as a store: one server, a cluster, or the primary behind
//! Sentinel, told apart by the URL alone.
//!
//! - `redis://`, `rediss://`, `redis+unix://`, `unix://`: one server (the
//!   redis crate reads the URL);
//! - several of those separated by commas, or `redis+cluster://` /
//!   `rediss+cluster://` with one `[user:password@]` and several
//!   `host:port`: a cluster, through those seed nodes;
//! - `redis+sentinel://` / `rediss+sentinel://`: the sentinels, then the
//!   service (their commas are the sentinels').

use super::{RedisConfig, RedisStore};
use crate::store::BoxFuture;
use crate::store::kit::{invalid_url, scheme};
use crate::{ConnectOptions, LockManager, Result};

/// A manager over the Redis store `url` names.
async fn connect(url: &str, config: RedisConfig) -> Result<LockManager> {
    let store = match nodes(url)? {
        Nodes::One => RedisStore::connect_with(url, config).await?,
        Nodes::Cluster(seeds) => {
            let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
            RedisStore::cluster_with(&seeds, config).await?
        }
    };
    Ok(LockManager::new(store))
}

/// Which kind of Redis deployment a URL names.
#[derive(Debug, PartialEq, Eq)]
enum Nodes {
    /// One server, or the primary behind Sentinel: the URL as given.
    One,
    /// A cluster, through these seed URLs.
    Cluster(Vec<String>),
}

fn nodes(url: &str) -> Result<Nodes> {
    let Some((scheme, rest)) = scheme(url) else {
        return Ok(Nodes::One);
    };
    if scheme.ends_with("+sentinel") {
        return Ok(Nodes::One);
    }
    if let Some(plain) = scheme.strip_suffix("+cluster") {
        return cluster_seeds(url, plain, rest).map(Nodes::Cluster);
    }
    if url.contains(',') {
        let seeds: Vec<String> = url
            .split(',')
            .map(str::trim)
            .filter(|seed| !seed.is_empty())
            .map(str::to_owned)
            .collect();
        return Ok(Nodes::Cluster(seeds));
    }
    Ok(Nodes::One)
}

/// `redis+cluster://[user:password@]host:port,host:port` as one URL per
/// node of the scheme `plain`, each with the credentials.
fn cluster_seeds(url: &str, plain: &str, rest: &str) -> Result<Vec<String>> {
    let (credentials, hosts) = match rest.rfind('@') {
        Some(at) => (&rest[..=at], &rest[at + 1..]),
        None => ("", rest),
    };
    let seeds: Vec<String> = hosts
        .split(',')
        .map(|host| host.trim().trim_end_matches('/'))
        .filter(|host| !host.is_empty())
        .map(|host| format!("{plain}://{credentials}{host}"))
        .collect();
    if seeds.is_empty() {
        return Err(invalid_url(
            url,
            "a cluster URL names no node; write redis+cluster://[user:password@]host:port[,host:port...]",
        ));
    }
    Ok(seeds)
}

/// Opens the store a URL of this store's schemes names, set up with
/// `options`: this store's entry in [`connect`](crate::connect)'s table.
pub(crate) fn open(url: &str, options: ConnectOptions) -> BoxFuture<'_, Result<LockManager>> {
    let mut config = options.store(RedisConfig::timeout);
    if let Some(tls) = options.tls_given() {
        // Field by field, as every store merges them: the options' CA or
        // client certificate over the configuration's.
        config.tls = config.tls.clone().overridden_by(tls.clone());
    }
    Box::pin(connect(url, config))
}

impl ConnectOptions {
    /// How a `redis://` (cluster, Sentinel...) URL's store behaves: its
    /// release channels, [`replica_acks`](RedisConfig::replica_acks)...
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_core::{ConnectOptions, RedisConfig};
    ///
    /// let options = ConnectOptions::new()
    ///     .redis(RedisConfig::new().replica_acks(1, Duration::from_millis(500)));
    /// # let _ = options;
    /// ```
    pub fn redis(self, config: RedisConfig) -> Self {
        self.with_store(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_url_becomes_one_url_per_node_with_the_credentials() {
        assert_eq!(
            nodes("redis+cluster://u:p@a:1, b:2/").expect("nodes"),
            Nodes::Cluster(vec!["redis://u:p@a:1".into(), "redis://u:p@b:2".into()])
        );
        assert_eq!(
            nodes("rediss+cluster://a:1,b:2").expect("nodes"),
            Nodes::Cluster(vec!["rediss://a:1".into(), "rediss://b:2".into()]),
            "TLS carries over to every node"
        );
        let empty = nodes("redis+cluster://admin:hunter2@").expect_err("no node");
        assert!(
            matches!(&empty, crate::Error::InvalidUrl { .. }),
            "{empty:?}"
        );
        assert!(
            !empty.to_string().contains("hunter2"),
            "never shows the password: {empty}"
        );
    }

    #[test]
    fn several_urls_are_a_cluster_and_a_sentinel_list_is_one_service() {
        assert_eq!(
            nodes("redis://a:1, redis://b:2").expect("nodes"),
            Nodes::Cluster(vec!["redis://a:1".into(), "redis://b:2".into()])
        );
        assert_eq!(nodes("redis://a:1/0").expect("one"), Nodes::One);
        assert_eq!(
            nodes("redis+sentinel://s1:26379,s2:26379/mymaster").expect("sentinel"),
            Nodes::One,
            "the sentinels' commas are the store's to read"
        );
    }
}
