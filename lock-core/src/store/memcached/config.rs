//! [`MemcachedConfig`]: how a [`MemcachedStore`](super::MemcachedStore)
//! behaves.

use std::time::Duration;

use crate::store::kit::Tls;

/// The default bound on every call.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);

/// The default number of connections.
const DEFAULT_POOL: usize = 2;

/// How a [`MemcachedStore`](super::MemcachedStore) behaves: its time
/// bound, its number of connections, and the certificates of its TLS
/// connections (`memcaches://`).
///
/// ```
/// use std::time::Duration;
/// use lock_core::{MemcachedConfig, Tls};
///
/// let config = MemcachedConfig::new()
///     .timeout(Duration::from_secs(1))
///     .pool_size(4)
///     .tls(Tls::new().ca_file("/etc/memcached/ca.pem"));
/// # let _ = config;
/// ```
///
/// Its `Debug` output shows where the certificates come from, never a
/// key's bytes.
#[derive(Clone, Debug)]
#[must_use = "a MemcachedConfig does nothing until passed to MemcachedStore::connect_with"]
pub struct MemcachedConfig {
    pub(super) timeout: Duration,
    pub(super) pool_size: usize,
    pub(super) tls: Tls,
}

impl Default for MemcachedConfig {
    fn default() -> Self {
        MemcachedConfig {
            timeout: DEFAULT_TIMEOUT,
            pool_size: DEFAULT_POOL,
            tls: Tls::new(),
        }
    }
}

impl MemcachedConfig {
    /// The defaults: a 3 s timeout and 2 connections.
    pub fn new() -> Self {
        Self::default()
    }

    /// The longest any one call (connect, acquire, release, extend...) may
    /// take before it fails with [`Error::Store`](crate::Error::Store).
    /// Default 3 s. A zero timeout is raised to 1 ms.
    pub fn timeout(self, timeout: Duration) -> Self {
        MemcachedConfig {
            timeout: timeout.max(Duration::from_millis(1)),
            ..self
        }
    }

    /// How many connections the store keeps (at least 1; default 2). Each
    /// lock name always uses the same connection, so its requests reach the
    /// server in the order they were made; more connections spread many
    /// names over more server threads.
    pub fn pool_size(self, pool_size: usize) -> Self {
        MemcachedConfig {
            pool_size: pool_size.max(1),
            ..self
        }
    }

    /// The CA that vouches for the server and the client certificate to
    /// present, for a `memcaches://` URL: memcached's TLS (`memcached -Z`),
    /// with lock-core's `memcached-tls` feature. The server's certificate
    /// is checked in full: it must chain to the CA and name the URL's host
    /// (or IP address). Without a CA, a public CA must have signed it.
    ///
    /// The URL's `sslrootcert`, `sslcert` and `sslkey` win over it, and so
    /// does [`ConnectOptions::tls`](crate::ConnectOptions::tls). A
    /// `memcache://` URL (plain TCP) leaves it unused: the scheme says
    /// whether the connection is TLS.
    pub fn tls(self, tls: Tls) -> Self {
        MemcachedConfig { tls, ..self }
    }
}
