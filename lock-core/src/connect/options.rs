//! [`ConnectOptions`]: the settings [`connect_with`](crate::connect_with)
//! hands to whichever store the URL names.
//!
//! Each store adds its own setter (`ConnectOptions::redis`...) and reads
//! its configuration back in its own folder (`store/<name>/url.rs`), so
//! this type names no store.

use std::any::Any;
use std::fmt;
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::time::Duration;

use crate::store::kit::Tls;

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
    tls: Option<Tls>,
    /// Each store's configuration, at most one of each type, as given.
    stores: Vec<Config>,
}

/// One store's configuration, of whichever type that store takes.
struct Config(Box<dyn StoreConfig>);

/// What a store's configuration type is to [`ConnectOptions`]: cloned with
/// it, shown in its `Debug` output (which each configuration keeps free of
/// passwords), and read back by type.
trait StoreConfig: Any + fmt::Debug + Send + Sync + UnwindSafe + RefUnwindSafe {
    fn clone_boxed(&self) -> Box<dyn StoreConfig>;
    fn as_any(&self) -> &dyn Any;
}

impl<C: Any + Clone + fmt::Debug + Send + Sync + UnwindSafe + RefUnwindSafe> StoreConfig for C {
    fn clone_boxed(&self) -> Box<dyn StoreConfig> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Clone for Config {
    fn clone(&self) -> Self {
        Config(self.0.clone_boxed())
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
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

    /// The CA and client certificate for the store's TLS connections,
    /// whichever store the URL names (for PostgreSQL when its `sslmode`
    /// asks for TLS, for etcd over `https://`, for memcached over
    /// `memcaches://`, for one Redis server over `rediss://`). It wins over the `tls` of any store configuration
    /// given here, as [`timeout`](ConnectOptions::timeout) does; the URL's
    /// own `sslrootcert`, `sslcert` and `sslkey` win over it.
    pub fn tls(mut self, tls: Tls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The [`tls`](ConnectOptions::tls) given, if any.
    #[cfg_attr(
        not(any(feature = "memcached", feature = "postgres", feature = "etcd")),
        allow(dead_code)
    )]
    pub(crate) fn tls_given(&self) -> Option<&Tls> {
        self.tls.as_ref()
    }

    /// The same options with `config` as its store's configuration, in
    /// place of any given before: for each store's own setter.
    #[cfg_attr(
        not(any(
            feature = "redis",
            feature = "memcached",
            feature = "postgres",
            feature = "etcd"
        )),
        allow(dead_code)
    )]
    pub(crate) fn with_store<C>(mut self, config: C) -> Self
    where
        C: Any + Clone + fmt::Debug + Send + Sync + UnwindSafe + RefUnwindSafe,
    {
        self.stores.retain(|given| !given.0.as_any().is::<C>());
        self.stores.push(Config(Box::new(config)));
        self
    }

    /// The configuration of type `C` given, or `C`'s default, with the
    /// common [`timeout`](ConnectOptions::timeout) set through
    /// `set_timeout` when one was given: what a store connects with.
    #[cfg_attr(
        not(any(
            feature = "redis",
            feature = "memcached",
            feature = "postgres",
            feature = "etcd"
        )),
        allow(dead_code)
    )]
    pub(crate) fn store<C: Any + Clone + Default>(&self, set_timeout: fn(C, Duration) -> C) -> C {
        let config = self
            .stores
            .iter()
            .find_map(|given| given.0.as_any().downcast_ref::<C>())
            .cloned()
            .unwrap_or_default();
        match self.timeout {
            Some(timeout) => set_timeout(config, timeout),
            None => config,
        }
    }
}

#[cfg(test)]
mod tests {
    // Options are built at startup and often captured by code that catches
    // panics (a test harness, a supervisor): they must stay unwind-safe,
    // whatever store configurations they hold.
    #[test]
    fn the_options_are_unwind_safe_send_and_sync() {
        fn check<T: std::panic::UnwindSafe + std::panic::RefUnwindSafe + Send + Sync>() {}
        check::<super::ConnectOptions>();
    }

    // Each test imports what it needs inside: a build may leave out the
    // stores it tests.

    // One `--timeout` must reach whichever store the URL names, and must
    // not depend on the order the options were written in. (The configs
    // compare by their `Debug` output, which shows every setting.)
    #[cfg(all(feature = "redis", feature = "postgres"))]
    #[test]
    fn the_common_timeout_wins_over_each_store_configurations_own() {
        use super::*;
        use crate::{PostgresConfig, RedisConfig};
        let second = Duration::from_secs(1);
        let given = || PostgresConfig::new().timeout(second * 9).schema("ops");
        let wanted = format!("{:?}", given().timeout(second));
        let before = ConnectOptions::new().timeout(second).postgres(given());
        let after = ConnectOptions::new().postgres(given()).timeout(second);
        for options in [before, after] {
            assert_eq!(
                format!("{:?}", options.store(PostgresConfig::timeout)),
                wanted,
                "the common timeout, and the rest of the store's configuration"
            );
            assert_eq!(
                format!("{:?}", options.store(RedisConfig::timeout)),
                format!("{:?}", RedisConfig::new().timeout(second)),
                "every store's"
            );
        }
        assert_eq!(
            format!(
                "{:?}",
                ConnectOptions::new()
                    .postgres(given())
                    .store(PostgresConfig::timeout)
            ),
            format!("{:?}", given()),
            "without one, the store's own"
        );
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn the_options_debug_output_never_shows_a_password() {
        use super::*;
        use crate::EtcdConfig;
        let options = ConnectOptions::new().etcd(EtcdConfig::new().user("locks", "hunter2"));
        let shown = format!("{options:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("locks"), "the user is shown: {shown}");
    }
}
