//! [`ConnectOptions`]: the settings [`connect_with`](crate::connect_with)
//! hands to whichever store the URL names.

use std::time::Duration;

#[cfg(feature = "etcd")]
use crate::EtcdConfig;
#[cfg(feature = "memcached")]
use crate::MemcachedConfig;
#[cfg(feature = "postgres")]
use crate::PostgresConfig;
#[cfg(feature = "redis")]
use crate::RedisConfig;

/// What [`connect_with`](crate::connect_with) sets up the store with,
/// whichever store the URL names: one time bound for every call, and each
/// store's own configuration.
///
/// The URL says where the store is (and, for the stores whose URLs carry
/// them, the credentials); these options say how to use it. An
/// application whose store comes from configuration can so set all of
/// them up front, without knowing which store the URL will name: the
/// configuration of a store the URL does not name is left unused.
/// Without options, each store runs with its defaults (a 3 s time bound
/// on every call).
///
/// ```
/// use std::time::Duration;
/// use lock_core::ConnectOptions;
///
/// let options = ConnectOptions::new().timeout(Duration::from_secs(1));
/// # let _ = options;
/// ```
///
/// Its `Debug` output never shows a password (an etcd user's, set through
/// `EtcdConfig::user`, is left out).
#[derive(Clone, Debug, Default)]
#[must_use = "ConnectOptions do nothing until passed to lock_core::connect_with"]
pub struct ConnectOptions {
    timeout: Option<Duration>,
    #[cfg(feature = "redis")]
    redis: RedisConfig,
    #[cfg(feature = "memcached")]
    memcached: MemcachedConfig,
    #[cfg(feature = "postgres")]
    postgres: PostgresConfig,
    #[cfg(feature = "etcd")]
    etcd: EtcdConfig,
}

impl ConnectOptions {
    /// Each store's defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// The longest any one call to the store (connect, acquire, release,
    /// extend...) may take before it fails with
    /// [`Error::Store`](crate::Error::Store), whichever store the URL names.
    ///
    /// It wins over the timeout of any store configuration given here,
    /// whatever order they are set in: it is the one setting every store
    /// has, so an application (or a command line's `--timeout`) can set it
    /// once. Without it, each store's configuration keeps its own (3 s by
    /// default). A zero timeout is raised to 1 ms, as the stores do.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

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
    #[cfg(feature = "redis")]
    pub fn redis(mut self, config: RedisConfig) -> Self {
        self.redis = config;
        self
    }

    /// How a `memcache://` URL's store behaves: its number of connections...
    #[cfg(feature = "memcached")]
    pub fn memcached(mut self, config: MemcachedConfig) -> Self {
        self.memcached = config;
        self
    }

    /// How a `postgres://` URL's store behaves: where its lease table is
    /// and whether it may create it, its pool...
    ///
    /// ```
    /// use lock_core::{ConnectOptions, PostgresConfig};
    ///
    /// // The table comes from the application's own migrations.
    /// let options = ConnectOptions::new()
    ///     .postgres(PostgresConfig::new().schema("ops").create_table(false));
    /// # let _ = options;
    /// ```
    #[cfg(feature = "postgres")]
    pub fn postgres(mut self, config: PostgresConfig) -> Self {
        self.postgres = config;
        self
    }

    /// How an `etcd://` (or `http://`) URL's store behaves. A user given in
    /// the URL (`etcd://user:password@host:2379`) wins over one set with
    /// [`EtcdConfig::user`].
    #[cfg(feature = "etcd")]
    pub fn etcd(mut self, config: EtcdConfig) -> Self {
        self.etcd = config;
        self
    }

    /// The Redis configuration, with the common timeout when one is set.
    #[cfg(feature = "redis")]
    pub(super) fn into_redis(self) -> RedisConfig {
        match self.timeout {
            Some(timeout) => self.redis.timeout(timeout),
            None => self.redis,
        }
    }

    /// The memcached configuration, with the common timeout when one is set.
    #[cfg(feature = "memcached")]
    pub(super) fn into_memcached(self) -> MemcachedConfig {
        match self.timeout {
            Some(timeout) => self.memcached.timeout(timeout),
            None => self.memcached,
        }
    }

    /// The PostgreSQL configuration, with the common timeout when one is set.
    #[cfg(feature = "postgres")]
    pub(super) fn into_postgres(self) -> PostgresConfig {
        match self.timeout {
            Some(timeout) => self.postgres.timeout(timeout),
            None => self.postgres,
        }
    }

    /// The etcd configuration, with the common timeout when one is set.
    #[cfg(feature = "etcd")]
    pub(super) fn into_etcd(self) -> EtcdConfig {
        match self.timeout {
            Some(timeout) => self.etcd.timeout(timeout),
            None => self.etcd,
        }
    }
}

#[cfg(test)]
mod tests {
    // Each test imports what it needs inside: a build may leave out the
    // stores it tests.

    // One `--timeout` must reach whichever store the URL names, and must
    // not depend on the order the options were written in. (The configs
    // compare by their `Debug` output, which shows every setting.)
    #[cfg(all(feature = "redis", feature = "postgres"))]
    #[test]
    fn the_common_timeout_wins_over_each_store_configurations_own() {
        use super::*;
        let second = Duration::from_secs(1);
        let given = || PostgresConfig::new().timeout(second * 9).schema("ops");
        let wanted = format!("{:?}", given().timeout(second));
        let before = ConnectOptions::new().timeout(second).postgres(given());
        let after = ConnectOptions::new().postgres(given()).timeout(second);
        for options in [before, after] {
            assert_eq!(
                format!("{:?}", options.clone().into_postgres()),
                wanted,
                "the common timeout, and the rest of the store's configuration"
            );
            assert_eq!(
                format!("{:?}", options.into_redis()),
                format!("{:?}", RedisConfig::new().timeout(second)),
                "every store's"
            );
        }
        assert_eq!(
            format!(
                "{:?}",
                ConnectOptions::new().postgres(given()).into_postgres()
            ),
            format!("{:?}", given()),
            "without one, the store's own"
        );
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn the_options_debug_output_never_shows_a_password() {
        use super::*;
        let options = ConnectOptions::new().etcd(EtcdConfig::new().user("locks", "hunter2"));
        let shown = format!("{options:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("locks"), "the user is shown: {shown}");
    }
}
