//! `memcache://` (or `memcached://`) as a store: one server, read by
//! [`MemcachedStore::connect_with`], which also refuses what memcached
//! cannot do (credentials, several servers).

use super::{MemcachedConfig, MemcachedStore};
use crate::{LockManager, Result};

/// A manager over the memcached server `url` names.
pub(crate) async fn connect(url: &str, config: MemcachedConfig) -> Result<LockManager> {
    Ok(LockManager::new(
        MemcachedStore::connect_with(url, config).await?,
    ))
}
