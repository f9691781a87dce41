//! `memcache://` (or `memcached://`), and `memcaches://` for TLS, as a
//! store: one server, read by [`MemcachedStore::connect_with`], which also
//! refuses what memcached cannot do (credentials, several servers).

use super::{MemcachedConfig, MemcachedStore};
use crate::store::BoxFuture;
use crate::{ConnectOptions, LockManager, Result};

/// A manager over the memcached server `url` names.
async fn connect(url: &str, config: MemcachedConfig) -> Result<LockManager> {
    Ok(LockManager::new(
        MemcachedStore::connect_with(url, config).await?,
    ))
}

/// Opens the store a URL of this store's schemes names, set up with
/// `options`: this store's entry in [`connect`](crate::connect)'s table.
pub(crate) fn open(url: &str, options: ConnectOptions) -> BoxFuture<'_, Result<LockManager>> {
    let mut config = options.store(MemcachedConfig::timeout);
    if let Some(tls) = options.tls_given() {
        config.tls = config.tls.overridden_by(tls.clone());
    }
    Box::pin(connect(url, config))
}

impl ConnectOptions {
    /// How a `memcache://` URL's store behaves: its number of connections...
    pub fn memcached(self, config: MemcachedConfig) -> Self {
        self.with_store(config)
    }
}
