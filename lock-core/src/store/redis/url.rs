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
use crate::store::kit::{StoreUrl, invalid_url};
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

/// Which deployment `url` names, read as every store URL is read
/// ([`StoreUrl`]): several URLs, or one `+cluster` URL's hosts, are a
/// cluster's seeds; anything else is one server, or Sentinel's primary.
fn nodes(url: &str) -> Result<Nodes> {
    let urls = StoreUrl::parse_list(url).map_err(|why| invalid_url(url, why))?;
    if urls.len() > 1 {
        return Ok(Nodes::Cluster(
            urls.iter().map(StoreUrl::to_client_url).collect(),
        ));
    }
    let one = &urls[0];
    let Some(plain) = one.scheme().strip_suffix("+cluster") else {
        return Ok(Nodes::One);
    };
    if one.hosts().is_empty() {
        return Err(invalid_url(
            url,
            "a cluster URL names no node; write redis+cluster://[user:password@]host:port[,host:port...]",
        ));
    }
    Ok(Nodes::Cluster(
        one.hosts()
            .iter()
            .map(|host| one.with_host(plain, host.clone()).to_client_url())
            .collect(),
    ))
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
            Nodes::Cluster(vec!["redis://u:p@a:1/".into(), "redis://u:p@b:2/".into()])
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
