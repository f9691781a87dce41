//! `postgres://` (or `postgresql://`) as a store: tokio-postgres reads the
//! URL, its query settings (`?application_name=`, `?options=`...)
//! included; the lease table's place comes from the [`PostgresConfig`].

use super::{PostgresConfig, PostgresStore};
use crate::{LockManager, Result};

/// A manager over the PostgreSQL database `url` names.
pub(crate) async fn connect(url: &str, config: PostgresConfig) -> Result<LockManager> {
    Ok(LockManager::new(
        PostgresStore::connect_with(url, config).await?,
    ))
}
