//! [`PostgresConfig`]: how a [`PostgresStore`](super::PostgresStore)
//! behaves.

use std::time::Duration;

use crate::store::kit::Tls;

/// How a [`PostgresStore`](super::PostgresStore) behaves: where its table
/// lives, whether it creates it, its time bound, its pool and its
/// notification channel.
///
/// ```
/// use std::time::Duration;
/// use lock_core::PostgresConfig;
///
/// let config = PostgresConfig::new()
///     .schema("ops")
///     .table("leases")
///     .create_table(false) // the table comes from our own migrations
///     .timeout(Duration::from_secs(1));
/// # let _ = config;
/// ```
#[derive(Clone, Debug)]
#[must_use = "a PostgresConfig does nothing until passed to a PostgresStore constructor"]
pub struct PostgresConfig {
    pub(super) schema: Option<String>,
    pub(super) table: String,
    pub(super) create_table: bool,
    pub(super) timeout: Duration,
    pub(super) pool_size: usize,
    pub(super) channel: String,
    pub(super) sweep_every: Duration,
    pub(super) prepared_statements: bool,
    pub(super) tls: Tls,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        PostgresConfig {
            schema: None,
            table: "lock_leases".to_owned(),
            create_table: true,
            timeout: Duration::from_secs(3),
            pool_size: 4,
            channel: "lock_core_released".to_owned(),
            sweep_every: Duration::from_secs(60),
            prepared_statements: true,
            tls: Tls::new(),
        }
    }
}

impl PostgresConfig {
    /// The defaults: table `lock_leases` in the connection's current schema,
    /// created if missing, a 3 s timeout, 4 connections, channel
    /// `lock_core_released`, a sweep every minute, prepared statements.
    pub fn new() -> Self {
        Self::default()
    }

    /// The schema of the lease table. A plain identifier: letters, digits
    /// and `_`.
    ///
    /// Without it, the store resolves the schema once, when it is set up,
    /// and names it in every statement: the schema that holds the lease
    /// table on the *default* `search_path` of its role and connection (the
    /// database's, the role's, or the connection string's `options`), else
    /// the first schema on that path. A `search_path` SET later on a
    /// session (by a pool's hook, or left behind by another client of
    /// PgBouncer in transaction mode) is ignored, so every process of one
    /// application leases each name in one table. Processes whose roles or
    /// connection strings have different default paths must agree through
    /// this setting.
    pub fn schema(self, schema: impl Into<String>) -> Self {
        PostgresConfig {
            schema: Some(schema.into()),
            ..self
        }
    }

    /// The lease table's name (default `lock_leases`; its fencing counters
    /// go in `<table>_fences`). A plain identifier.
    pub fn table(self, table: impl Into<String>) -> Self {
        PostgresConfig {
            table: table.into(),
            ..self
        }
    }

    /// Whether connecting creates the tables (and the sweep index) when
    /// missing, with `CREATE ... IF NOT EXISTS` (default true). Turn it off
    /// when migrations own the schema; the store's docs show the DDL
    /// ([`PostgresStore`](super::PostgresStore), "The tables").
    pub fn create_table(self, create_table: bool) -> Self {
        PostgresConfig {
            create_table,
            ..self
        }
    }

    /// The longest any one call (connect, acquire, release, extend...) may
    /// take, waiting for a pooled connection included, before it fails with
    /// [`Error::Store`](crate::Error::Store). Default 3 s; a zero timeout is
    /// raised to 1 ms.
    pub fn timeout(self, timeout: Duration) -> Self {
        PostgresConfig {
            timeout: timeout.max(Duration::from_millis(1)),
            ..self
        }
    }

    /// How many connections the store's own pool keeps (default 4; at
    /// least 1). Not used with [`from_pool`](super::PostgresStore::from_pool).
    /// The `LISTEN` connection comes on top.
    pub fn pool_size(self, pool_size: usize) -> Self {
        PostgresConfig {
            pool_size: pool_size.max(1),
            ..self
        }
    }

    /// The notification channel releases are announced on (default
    /// `lock_core_released`). Every process sharing the table must use the
    /// same one.
    ///
    /// 1 to 63 bytes, without NUL: PostgreSQL cuts a longer `LISTEN`
    /// channel but refuses it in `pg_notify`, so connecting refuses it with
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) rather than
    /// let releases fail.
    pub fn channel(self, channel: impl Into<String>) -> Self {
        PostgresConfig {
            channel: channel.into(),
            ..self
        }
    }

    /// Whether each pooled connection prepares the store's statements once
    /// and reuses them (default true: saves the server parsing and planning
    /// every call). Turn it off behind PgBouncer in transaction mode when it
    /// cannot keep prepared statements (before 1.21, or without
    /// `max_prepared_statements`): statements are then sent unnamed, with
    /// their parameter types, still one round trip each.
    pub fn prepared_statements(self, prepared_statements: bool) -> Self {
        PostgresConfig {
            prepared_statements,
            ..self
        }
    }

    /// The CA and client certificate for TLS connections (with the
    /// `postgres-tls` feature), when the URL's `sslmode` asks for TLS or
    /// the server offers it. The URL's `sslrootcert`, `sslcert` and
    /// `sslkey` win over it. Used for the store's pool, its `LISTEN`
    /// connection and its cancel requests; with
    /// [`from_pool`](super::PostgresStore::from_pool), for the latter two.
    pub fn tls(self, tls: Tls) -> Self {
        PostgresConfig { tls, ..self }
    }

    /// How often the store deletes rows that holders left behind without
    /// releasing (default every minute; see the store's docs).
    pub fn sweep_every(self, sweep_every: Duration) -> Self {
        PostgresConfig {
            sweep_every: sweep_every.max(Duration::from_secs(1)),
            ..self
        }
    }
}
