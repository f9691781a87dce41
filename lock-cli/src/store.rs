//! From the command line to a connected store: `lock_core::connect_with`
//! reads the URL (its scheme picks the store, and its errors never show a
//! password); this file adds what an operator's tool needs on top.

use std::path::PathBuf;
use std::time::Duration;

use lock_core::{ConnectOptions, Error, LockManager, Tls};

/// Store settings the command line can change.
pub(crate) struct Settings {
    /// Each call's time bound.
    pub(crate) timeout: Duration,
    /// The CA and client certificate the command line named, if any.
    pub(crate) tls: Option<Tls>,
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

impl Settings {
    /// The options the stores are set up with.
    fn options(&self) -> ConnectOptions {
        let mut options = ConnectOptions::new().timeout(self.timeout);
        if let Some(tls) = &self.tls {
            options = options.tls(tls.clone());
        }
        #[cfg(feature = "postgres")]
        let options = {
            // Never create tables from an operator's tool: a missing table
            // means the URL, schema or table name is not the application's.
            let mut config = lock_core::PostgresConfig::new()
                .create_table(false)
                .pool_size(2);
            if let Some(schema) = &self.pg_schema {
                config = config.schema(schema.clone());
            }
            if let Some(table) = &self.pg_table {
                config = config.table(table.clone());
            }
            options.postgres(config)
        };
        options
    }
}

/// The [`Tls`] of `--sslrootcert` and `--sslcert`/`--sslkey`, when either
/// was given.
pub(crate) fn tls(ca: Option<PathBuf>, identity: Option<(PathBuf, PathBuf)>) -> Option<Tls> {
    if ca.is_none() && identity.is_none() {
        return None;
    }
    let mut tls = Tls::new();
    if let Some(ca) = ca {
        tls = tls.ca_file(ca);
    }
    if let Some((cert, key)) = identity {
        tls = tls.client_cert_file(cert, key);
    }
    Some(tls)
}

/// Connects to the store `url` names, under `prefix`.
pub(crate) async fn connect(
    url: &str,
    prefix: &str,
    settings: &Settings,
) -> Result<LockManager, String> {
    let locks = lock_core::connect_with(url, settings.options())
        .await
        .map_err(|error| explained(&error))?;
    if !locks.is_shared() {
        // Only `memory://`: the store of the process that reads the URL.
        return Err(
            "memory:// is the store inside each process's own memory, where this command cannot \
             see another's locks; give the URL of the store the application's locks are in"
                .to_owned(),
        );
    }
    Ok(locks.with_prefix(prefix))
}

/// What the operator reads when connecting failed.
fn explained(error: &Error) -> String {
    let text = crate::chain(error);
    match error {
        Error::StoreNotBuilt { store, feature, .. } => format!(
            "this `locks` was built without {store} support; rebuild lock-cli with the `{feature}` feature"
        ),
        Error::Store { .. } if text.contains("does not exist") => format!(
            "{text}\nno lease table there: give the database, --pg-schema and --pg-table the application's PostgresConfig uses"
        ),
        _ => text,
    }
}
