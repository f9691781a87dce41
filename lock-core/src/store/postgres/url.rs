//! `postgres://` (or `postgresql://`) as a store: tokio-postgres reads the
//! URL, its query settings (`?application_name=`, `?options=`...)
//! included; the lease table's place comes from the [`PostgresConfig`].

use super::{PostgresConfig, PostgresStore};
use crate::store::BoxFuture;
use crate::{ConnectOptions, LockManager, Result};

/// A manager over the PostgreSQL database `url` names.
async fn connect(url: &str, config: PostgresConfig) -> Result<LockManager> {
    Ok(LockManager::new(
        PostgresStore::connect_with(url, config).await?,
    ))
}

/// Opens the store a URL of this store's schemes names, set up with
/// `options`: this store's entry in [`connect`](crate::connect)'s table.
pub(crate) fn open(url: &str, options: ConnectOptions) -> BoxFuture<'_, Result<LockManager>> {
    let mut config = options.store(PostgresConfig::timeout);
    if let Some(tls) = options.tls_given() {
        // Field by field, as every store merges them: the options' CA or
        // client certificate over the configuration's.
        config.tls = config.tls.clone().overridden_by(tls.clone());
    }
    Box::pin(connect(url, config))
}

impl ConnectOptions {
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
    pub fn postgres(self, config: PostgresConfig) -> Self {
        self.with_store(config)
    }
}
