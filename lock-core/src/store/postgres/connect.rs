//! Connecting a [`PostgresStore`]: the pool, the lease tables (found, or
//! created under an advisory lock), the statements written for them, and
//! the store's background tasks (the `LISTEN` connection, the sweep).

use std::sync::Arc;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};

use super::checkout::{Checkout, call_deadline};
use super::listen::{self, Listener};
use super::sql::{self, Statements};
use super::sweep;
use super::link::{self, Link};
use super::{PostgresConfig, PostgresStore, Shared, environment};
use crate::store::kit::tls_explained;
use crate::store::kit::{Background, BoxError, Reopen, Waiters};
use crate::{Error, Result};

impl PostgresStore {
    /// Connects to PostgreSQL with the default [`PostgresConfig`].
    ///
    /// `url` is `postgres://[user[:password]@]host[:port][/database]` (or
    /// the `key=value` form tokio-postgres reads), with libpq's TLS words
    /// when wanted: `sslmode` (`disable`, `prefer`, `require`, `verify-ca`,
    /// `verify-full`), and the PEM files `sslrootcert` (the CA, or `system`
    /// for the public CAs), `sslcert` and `sslkey` (a client certificate).
    /// TLS needs the `postgres-tls` feature: without it, a mode or a
    /// certificate that needs TLS is refused. What the URL does not say
    /// comes from libpq's environment variables (`PGSSLMODE`, `PGHOST`...).
    /// See the [store's docs](PostgresStore#tls) for what each mode checks,
    /// and which variables are read.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidUrl`] when the URL cannot be read, or names a
    ///   setting or value PostgreSQL's connection strings do not take;
    /// - [`Error::InvalidConfig`] when the configuration cannot work: a
    ///   table, schema or channel the store refuses
    ///   ([`PostgresConfig`]), TLS settings that contradict each other, a
    ///   certificate file that is missing or holds no certificate;
    /// - [`Error::Store`] when the server cannot be reached within the
    ///   timeout, refuses the connection or its TLS handshake, or the table
    ///   cannot be created (or, with `create_table(false)`, does not
    ///   exist).
    pub async fn connect(url: &str) -> Result<PostgresStore> {
        Self::connect_with(url, PostgresConfig::default()).await
    }

    /// Connects to PostgreSQL with `config`.
    ///
    /// # Errors
    ///
    /// As [`connect`](PostgresStore::connect).
    pub async fn connect_with(url: &str, config: PostgresConfig) -> Result<PostgresStore> {
        Self::open(url, config, true).await
    }

    /// Connects to `url` with a pool of its own; with `reopens`, a store
    /// that can open itself again that way ([`LockStore::reopen`]).
    async fn open(url: &str, config: PostgresConfig, reopens: bool) -> Result<PostgresStore> {
        let reopen = reopens.then(|| reopen(url, &config));
        let link = parse_url(url, &config)?;
        let manager = Manager::from_config(
            link.config.clone(),
            link.connector.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(config.pool_size)
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| Error::invalid_config("postgres", format!("the pool cannot be built: {e}")))?;
        Self::start(pool, link, config, reopen).await
    }

    /// A store over the application's own pool, so the locks share its
    /// connections (TLS and all), plus a `LISTEN` connection of its own to
    /// `listen_url`, which must keep its session (straight to PostgreSQL,
    /// or a PgBouncer pool in session mode). `listen_url`'s `sslmode` and
    /// certificates (or `config`'s [`tls`](PostgresConfig::tls)) are used
    /// for that connection and for cancelling a statement cut off on one
    /// of `pool`'s, as for [`connect`](PostgresStore::connect), with the
    /// same rules: give it the `sslmode` and certificates `pool` uses. A
    /// `listen_url` that asks for no TLS (no `sslmode`, no certificates)
    /// sends cancel requests plain, and none at all for a connection of
    /// `pool` that uses TLS (its statement then runs its course, and a
    /// warning says why): never over TLS that checks no certificate.
    ///
    /// # Errors
    ///
    /// As [`connect`](PostgresStore::connect).
    pub async fn from_pool(
        pool: Pool,
        listen_url: &str,
        config: PostgresConfig,
    ) -> Result<PostgresStore> {
        let link = parse_url(listen_url, &config)?;
        let reopen = reopen(listen_url, &config);
        Self::start(pool, link, config, Some(reopen)).await
    }

    async fn start(
        pool: Pool,
        link: Link,
        config: PostgresConfig,
        reopen: Option<Reopen>,
    ) -> Result<PostgresStore> {
        let shown = shown(&link.config);
        let invalid = |why: String| Error::invalid_config("postgres", why);
        let named = |suffix: &str| sql::identifier(&format!("{}{suffix}", config.table));
        let (leases, fences, sweep_index) = (
            named("").map_err(invalid)?,
            named("_fences").map_err(invalid)?,
            named("_sweep").map_err(invalid)?,
        );
        listen::check_channel(&config.channel).map_err(invalid)?;
        let configured = match &config.schema {
            Some(schema) => Some(sql::identifier(schema).map_err(invalid)?),
            None => None,
        };
        let (deadline, ends) = call_deadline(config.timeout);
        let setup = async {
            let mut client = Checkout::new(
                pool.get().await.map_err(|e| Box::new(e) as BoxError)?,
                ends,
                config.timeout,
                &link.connector,
            );
            let done = async {
                // Without a configured schema, one read once and written
                // into every statement: connections whose `search_path`
                // differs (an application's pool, PgBouncer handing out
                // other clients' sessions) must not see two tables. It is
                // read under the role's and the connection's own default
                // `search_path` (`SET LOCAL ... TO DEFAULT`), never what the
                // session was last SET to, so every process of one
                // application resolves the same one: the schema that holds
                // the lease table on that path, else the first on it.
                let schema = match &configured {
                    Some(schema) => schema.clone(),
                    None => {
                        let literal = format!("'{}'", leases.replace('\'', "''"));
                        let resolve = format!(
                            "SELECT coalesce((SELECT n.nspname FROM pg_catalog.pg_class c \
                             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                             WHERE c.oid = pg_catalog.to_regclass({literal})), \
                             pg_catalog.current_schema())"
                        );
                        // Simple queries only: no named statement, which a
                        // pooler in transaction mode may not keep.
                        let transaction = client.transaction().await?;
                        transaction
                            .batch_execute("SET LOCAL search_path TO DEFAULT")
                            .await?;
                        let messages = transaction.simple_query(&resolve).await?;
                        transaction.rollback().await?;
                        let current = messages.iter().find_map(|message| match message {
                            tokio_postgres::SimpleQueryMessage::Row(row) => {
                                row.get(0).map(str::to_owned)
                            }
                            _ => None,
                        });
                        let Some(current) = current else {
                            return Err::<_, BoxError>(
                                "the default search_path names no schema that exists, so the lease table has none to live in; set PostgresConfig::schema"
                                    .into(),
                            );
                        };
                        sql::quoted(&current)
                    }
                };
                let (leases, fences) = (format!("{schema}.{leases}"), format!("{schema}.{fences}"));
                if config.create_table {
                    let create_schema = match &configured {
                        Some(schema) => format!("CREATE SCHEMA IF NOT EXISTS {schema};"),
                        None => String::new(),
                    };
                    // Under a transaction-level advisory lock: two processes
                    // creating the tables at once can otherwise collide in
                    // the catalog even with IF NOT EXISTS. A real transaction,
                    // rolled back when a statement fails: the connection may
                    // be the application's, and goes back to its pool
                    // neither inside an aborted transaction nor holding the
                    // advisory lock. Without the server's NOTICEs: each
                    // `IF NOT EXISTS` that finds its relation sends one,
                    // which the client logs, on every connect (`SET LOCAL`
                    // ends with the transaction).
                    let ddl = format!(
                        "SET LOCAL client_min_messages = warning; SELECT pg_advisory_xact_lock(hashtext('lock-core schema')); {create_schema} {}",
                        sql::create_tables(&leases, &fences, &sweep_index)
                    );
                    let transaction = client.transaction().await?;
                    match transaction.batch_execute(&ddl).await {
                        Ok(()) => transaction.commit().await?,
                        Err(failed) => {
                            transaction.rollback().await?;
                            return Err(failed.into());
                        }
                    }
                } else {
                    client
                        .batch_execute(&sql::check_tables(&leases, &fences))
                        .await
                        .map_err(|e| -> BoxError {
                            format!(
                                "{e}; the tables must have every column of `PostgresStore`'s docs (the read side added reader_tokens text[], reader_expiries timestamptz[] and writer_waits_until timestamptz to the lease table): add them, or let the store create and upgrade its tables (PostgresConfig::create_table)"
                            )
                            .into()
                        })?;
                }
                Ok((leases, fences))
            }
            .await;
            client.answered();
            done
        };
        tracing::debug!(store = %shown, check = ?link.check, "connecting to PostgreSQL");
        let (leases, fences) = deadline
            .bound(setup)
            .await
            .map_err(|e| Error::store("connect", shown.clone(), tls_explained(e.into_boxed())))?;
        let statements = Statements::new(&leases, &fences);
        let waiters = Arc::new(Waiters::default());
        let connector = link.connector.clone();
        let listener = Listener {
            link,
            channel: config.channel.clone(),
            timeout: config.timeout,
            waiters: Arc::clone(&waiters),
        };
        // Listen before returning, so the very first waiter can be woken.
        let session = listener.listen().await.map_err(|e| {
            Error::store(
                "listen for releases on",
                shown.clone(),
                tls_explained(format!("could not LISTEN: {e}").into()),
            )
        })?;
        let mut tasks = Background::new();
        tasks.spawn(listener.run(session));
        tasks.spawn(sweep::sweep(
            pool.clone(),
            connector.clone(),
            statements.sweep.clone(),
            config.sweep_every,
            config.timeout,
        ));
        Ok(PostgresStore {
            shared: Arc::new(Shared {
                pool,
                statements,
                waiters,
                config,
                shown,
                connector,
                reopen,
                _tasks: tasks,
            }),
        })
    }

    /// The configuration the store runs with.
    pub fn config(&self) -> &PostgresConfig {
        &self.shared.config
    }
}

/// Where and how `url` says to connect, with `config`'s certificates and
/// libpq's environment variables for what the URL does not say, or an
/// error that never shows the password.
fn parse_url(url: &str, config: &PostgresConfig) -> Result<Link> {
    link::link(url, &config.tls, &environment::process)
}

/// `user@host:port/database` of `config`, never its password.
fn shown(config: &tokio_postgres::Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|host| match host {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_default();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "{}@{host}:{port}/{}",
        config.get_user().unwrap_or(""),
        config.get_dbname().unwrap_or("")
    )
}

/// How a store connected to `url` opens itself again
/// ([`LockStore::reopen`](crate::LockStore::reopen)): a pool of its own
/// over `url` (for a store over the application's pool, its `listen_url`,
/// a connection straight to the same database).
fn reopen(url: &str, config: &PostgresConfig) -> Reopen {
    let (url, config) = (url.to_owned(), config.clone());
    Reopen::new(move || {
        let (url, config) = (url.clone(), config.clone());
        async move { PostgresStore::open(&url, config, false).await }
    })
}
