//! Leases in PostgreSQL: the database most applications already run.
//!
//! One job per file: [`config`] (the settings), [`sql`] (the table and the
//! one statement behind each operation), [`listen`] (the `LISTEN`
//! connection that wakes waiters), [`checkout`] (a pooled connection that
//! never goes back busy), [`names`] (the row name of any lock name); this
//! file is the store.

mod checkout;
mod config;
mod listen;
mod names;
mod sql;
pub(crate) mod url;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;
use tokio_postgres::types::{ToSql, Type};

use self::checkout::Checkout;
pub use self::config::PostgresConfig;
use self::listen::Listener;
use crate::store::kit::{self, Background, BoxError, Deadline, Waiters};
use crate::store::{AcquireRequest, Attempt, BoxFuture, LockStore, Wakeup};
use crate::{Error, Holder, Result};

/// A `NOTIFY` payload must stay under 8000 bytes; a longer name is announced
/// with an empty payload, which wakes every waiter of the process.
const MAX_PAYLOAD: usize = 7000;

/// Leases kept in a PostgreSQL table, shared by every process that uses the
/// same database and table.
///
/// ```no_run
/// # #[tokio::main] async fn main() -> lock_core::Result<()> {
/// use std::time::Duration;
/// use lock_core::{LockManager, PostgresStore};
///
/// let store = PostgresStore::connect("postgres://app@127.0.0.1:5432/app").await?;
/// let locks = LockManager::new(store);
/// let ran = locks
///     .lock("nightly-export", Duration::from_secs(600))
///     .run(async { Ok::<_, lock_core::Error>("exported") })
///     .await?;
/// # let _ = ran;
/// # Ok(()) }
/// ```
///
/// # One statement per operation, on the database's clock
///
/// | operation | statement |
/// |---|---|
/// | acquire | `INSERT ... ON CONFLICT (name) DO UPDATE ... WHERE expires_at <= now` (returning the fence, or the holder's remaining TTL for a waiting caller) |
/// | release | delete the row (or, for a fenced name, expire it) where the token is ours, and `NOTIFY` if someone waits |
/// | extend | `UPDATE ... SET expires_at = now + ttl WHERE token = ours AND expires_at > now` |
/// | holder | one `SELECT` |
/// | list | one `SELECT ... WHERE starts_with(name, prefix)`: a consistent snapshot |
///
/// Every time is the database's `clock_timestamp()`, never the client's.
/// Each pooled connection prepares each statement once and then runs it in
/// one round trip. Behind PgBouncer in transaction mode (before 1.21, or
/// without `max_prepared_statements`), a prepared statement may not
/// survive from one transaction to the next: turn
/// [`PostgresConfig::prepared_statements`] off, and each statement is sent
/// with its parameter types in one round trip and no named statement, with
/// nothing kept in the session. The `LISTEN` connection needs a session in
/// any case (straight to PostgreSQL, or a PgBouncer session pool).
///
/// # The tables
///
/// ```sql
/// CREATE TABLE IF NOT EXISTS lock_leases (
///     name          text        PRIMARY KEY,
///     token         text        NOT NULL,
///     holder        text        NOT NULL,  -- host:pid, for operators
///     acquired_at   timestamptz NOT NULL,
///     expires_at    timestamptz NOT NULL,
///     waited_until  timestamptz            -- someone waits: NOTIFY on release
/// );
/// CREATE INDEX IF NOT EXISTS lock_leases_sweep ON lock_leases (expires_at);
/// CREATE TABLE IF NOT EXISTS lock_leases_fences (
///     name   text   PRIMARY KEY,
///     fence  bigint NOT NULL
/// );
/// ```
///
/// Connecting creates them when missing ([`PostgresConfig::create_table`],
/// under a transaction-level advisory lock, so two processes starting at
/// once do not trip over each other). A release deletes its row, so the
/// lease table holds about one row per held name, whatever number of names
/// are used; a row its holder left behind (it died, or kept its claim) is
/// overwritten when its name is next acquired, or deleted by the sweep every
/// [`PostgresConfig::sweep_every`] once it has expired. Fencing counters
/// live apart, one row per name that ever asked for a token, and are never
/// deleted, so a name's tokens only ever grow.
///
/// # Any name
///
/// A PostgreSQL `text` cannot hold a NUL byte, and a primary-key entry
/// cannot exceed about 2.7 KB, so a name with a NUL byte, over 2 KB, or
/// holding `\u{1}sha256:` is kept under its first bytes (up to the NUL, at
/// most 1 KB) followed by `\u{1}sha256:` and the SHA-256 of the whole name.
/// Such a name leases, releases and reports its holder like any other;
/// [`list`](LockStore::list) shows it in that form, and its release wakes
/// every waiter of each listening process (the `NOTIFY` cannot carry it).
///
/// # Waiting without polling
///
/// Each store holds one `LISTEN` connection. A release `NOTIFY`s only when
/// someone waits for that name (a waiting acquire marks the row), so
/// uncontended locks send no notifications; the waiters of that name in
/// every listening process wake at once. Otherwise a waiter sleeps for the
/// holder's remaining TTL, with jitter. When the `LISTEN` connection breaks,
/// it is opened again after a growing pause and every waiter retries once.
///
/// # What PostgreSQL adds to [the guarantee](crate#the-guarantee-stated-honestly)
///
/// Leases are as durable as the database: committed, replicated as the
/// database is. Fencing tokens ([`fencing`](LockStore::fencing)) strictly
/// increase per name across holders, releases, expiry and restarts of the
/// store or the database. A failover to an asynchronous replica that had
/// not received a fresh lease can let a second holder in, as it would lose
/// any other committed row; synchronous replication closes that.
///
/// Leases are timed by the primary's wall clock (`clock_timestamp()`; SQL
/// has no monotonic clock to read). When that clock steps forward (an NTP
/// correction that steps rather than slews, a virtual machine resumed from
/// a pause, an operator setting the time), every lease in the table ends
/// early by the size of the step, so a second holder can get in while the
/// first still runs; a step back lengthens leases by as much. Keep the
/// database host's clock slewed, not stepped, while it serves (chrony's
/// `makestep` limited to startup, for example), and keep TTLs well above
/// any step you expect, or use [fencing tokens](LockStore::fencing) where
/// an overlap must be caught.
#[derive(Clone)]
pub struct PostgresStore {
    shared: Arc<Shared>,
}

struct Shared {
    pool: Pool,
    statements: Statements,
    waiters: Arc<Waiters>,
    config: PostgresConfig,
    /// `user@host:port/db`, for `Debug` and errors. Never a password.
    shown: String,
    /// The `LISTEN` connection and the sweep: kept only to be dropped,
    /// which aborts them with the store.
    _tasks: Background,
}

/// The statements, with the table's qualified name filled in.
struct Statements {
    /// By `[fenced][waiting]`.
    acquire: [[String; 2]; 2],
    release: String,
    extend: String,
    holder: String,
    list: String,
    sweep: String,
}

impl PostgresStore {
    /// Connects to PostgreSQL with the default [`PostgresConfig`].
    ///
    /// `url` is `postgres://[user[:password]@]host[:port][/database]` (or
    /// the `key=value` form tokio-postgres reads). Connections are plain
    /// TCP; for TLS, build a pool of your own and use
    /// [`from_pool`](PostgresStore::from_pool).
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when the URL is invalid, the server cannot be
    /// reached within the timeout, or the table cannot be created (or, with
    /// `create_table(false)`, does not exist).
    pub async fn connect(url: &str) -> Result<PostgresStore> {
        Self::connect_with(url, PostgresConfig::default()).await
    }

    /// Connects to PostgreSQL with `config`.
    ///
    /// # Errors
    ///
    /// As [`connect`](PostgresStore::connect).
    pub async fn connect_with(url: &str, config: PostgresConfig) -> Result<PostgresStore> {
        let pg = parse_url(url)?;
        let manager = Manager::from_config(
            pg.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(config.pool_size)
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| Error::store("connect", shown(&pg), e))?;
        Self::start(pool, pg, config).await
    }

    /// A store over the application's own pool, so the locks share its
    /// connections (TLS and all), plus a `LISTEN` connection of its own to
    /// `listen_url`, which must keep its session (straight to PostgreSQL,
    /// or a PgBouncer pool in session mode).
    ///
    /// # Errors
    ///
    /// As [`connect`](PostgresStore::connect).
    pub async fn from_pool(
        pool: Pool,
        listen_url: &str,
        config: PostgresConfig,
    ) -> Result<PostgresStore> {
        let pg = parse_url(listen_url)?;
        Self::start(pool, pg, config).await
    }

    async fn start(
        pool: Pool,
        listen: tokio_postgres::Config,
        config: PostgresConfig,
    ) -> Result<PostgresStore> {
        let shown = shown(&listen);
        let invalid = |why: String| Error::store("connect", shown.clone(), why);
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
                    // advisory lock.
                    let ddl = format!(
                        "SELECT pg_advisory_xact_lock(hashtext('lock-core schema')); {create_schema} {}",
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
                        .batch_execute(&format!(
                            "SELECT 1 FROM {leases} LIMIT 0; SELECT 1 FROM {fences} LIMIT 0"
                        ))
                        .await?;
                }
                Ok((leases, fences))
            }
            .await;
            client.answered();
            done
        };
        let (leases, fences) = deadline
            .bound(setup)
            .await
            .map_err(|e| Error::store("connect", shown.clone(), e.into_boxed()))?;
        let statements = Statements {
            acquire: [false, true].map(|fenced| {
                [false, true].map(|waiting| sql::acquire(&leases, &fences, fenced, waiting))
            }),
            release: sql::release(&leases),
            extend: sql::extend(&leases),
            holder: sql::holder(&leases),
            list: sql::list(&leases),
            sweep: sql::sweep(&leases),
        };
        let waiters = Arc::new(Waiters::default());
        let listener = Listener {
            config: listen,
            channel: config.channel.clone(),
            timeout: config.timeout,
            waiters: Arc::clone(&waiters),
        };
        // Listen before returning, so the very first waiter can be woken.
        let session = listener.listen().await.map_err(|e| {
            Error::store(
                "listen for releases on",
                shown.clone(),
                format!("could not LISTEN: {e}"),
            )
        })?;
        let mut tasks = Background::new();
        tasks.spawn(listener.run(session));
        tasks.spawn(sweep(
            pool.clone(),
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
                _tasks: tasks,
            }),
        })
    }

    /// The configuration the store runs with.
    pub fn config(&self) -> &PostgresConfig {
        &self.shared.config
    }

    /// Runs `statement` with typed `params` on a pooled connection, the wait
    /// for the connection included in one deadline.
    async fn query(
        &self,
        operation: &'static str,
        key: &str,
        statement: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<tokio_postgres::Row>> {
        let (deadline, ends) = call_deadline(self.shared.config.timeout);
        let call = async {
            let client = Checkout::new(
                self.shared
                    .pool
                    .get()
                    .await
                    .map_err(|e| Box::new(e) as BoxError)?,
                ends,
                self.shared.config.timeout,
            );
            // Cut off anywhere in here (the deadline, or the caller dropping
            // the call), `client` cancels the statement and is thrown away.
            let answer = async {
                if self.shared.config.prepared_statements {
                    let types: Vec<Type> = params.iter().map(|(_, ty)| ty.clone()).collect();
                    let values: Vec<&(dyn ToSql + Sync)> =
                        params.iter().map(|(value, _)| *value).collect();
                    let prepared = client.prepare_typed_cached(statement, &types).await?;
                    client.query(&prepared, &values).await
                } else {
                    client.query_typed(statement, params).await
                }
            }
            .await;
            client.answered();
            Ok::<_, BoxError>(answer?)
        };
        deadline
            .bound(call)
            .await
            .map_err(|e| Error::store(operation, key, e.into_boxed()))
    }

    /// Release, or force-release when `token` is `None`.
    async fn free(&self, operation: &'static str, key: &str, token: Option<&str>) -> Result<bool> {
        let stored = names::stored(key);
        // Waiters know the name, not its row name: a name kept as a hash
        // (or too long to send) wakes every waiter of each process instead.
        let payload = if names::is_raw(key) && key.len() <= MAX_PAYLOAD {
            key
        } else {
            ""
        };
        let rows = self
            .query(
                operation,
                key,
                &self.shared.statements.release,
                &[
                    (&&*stored, Type::TEXT),
                    (&token, Type::TEXT),
                    (&self.shared.config.channel, Type::TEXT),
                    (&payload, Type::TEXT),
                ],
            )
            .await?;
        let released = !rows.is_empty();
        if released {
            // This process's own waiters need not wait for the NOTIFY.
            self.shared.waiters.released(key);
        }
        Ok(released)
    }
}

/// The `tokio_postgres::Config` of `url`, or an error that never shows the
/// password.
fn parse_url(url: &str) -> Result<tokio_postgres::Config> {
    url.parse::<tokio_postgres::Config>().map_err(|e| {
        Error::store(
            "connect",
            "(the PostgreSQL URL)",
            format!("{e}; use a URL like postgres://user@127.0.0.1:5432/database"),
        )
    })
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

/// A call's deadline, `timeout` from now, and the instant it ends (`None`:
/// no bound), for the [`Checkout`] that may outlive it.
fn call_deadline(timeout: Duration) -> (Deadline, Option<tokio::time::Instant>) {
    let ends = tokio::time::Instant::now().checked_add(timeout);
    (Deadline::after(timeout, "PostgresConfig::timeout"), ends)
}

/// Deletes rows holders left behind, every `every`, for the store's life.
async fn sweep(pool: Pool, statement: String, every: Duration, timeout: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let (deadline, ends) = call_deadline(timeout);
        let swept = deadline
            .bound(async {
                let client = Checkout::new(
                    pool.get().await.map_err(|e| Box::new(e) as BoxError)?,
                    ends,
                    timeout,
                );
                let swept = client.execute(statement.as_str(), &[]).await;
                client.answered();
                Ok::<_, BoxError>(swept?)
            })
            .await;
        match swept {
            Ok(0) => {}
            Ok(rows) => tracing::debug!(rows, "swept lease rows their holders left behind"),
            Err(error) => tracing::debug!(%error, "could not sweep the lease table this time"),
        }
    }
}

/// Microseconds of `ttl`, for the statements.
fn micros(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX)
}

impl LockStore for PostgresStore {
    fn acquire<'a>(&'a self, request: AcquireRequest<'a>) -> BoxFuture<'a, Result<Attempt>> {
        Box::pin(async move {
            kit::check_key(request.key)?;
            // Before the statement: a release that lands between it and the
            // sleep must still wake us.
            let interest = request
                .wake
                .then(|| self.shared.waiters.register(request.key));
            let holder = kit::owner_of(request.token);
            let stored = names::stored(request.key);
            let rows = self
                .query(
                    "acquire",
                    request.key,
                    &self.shared.statements.acquire[usize::from(request.fenced)]
                        [usize::from(request.wake)],
                    &[
                        (&&*stored, Type::TEXT),
                        (&request.token, Type::TEXT),
                        (&holder, Type::TEXT),
                        (&micros(request.ttl), Type::INT8),
                    ],
                )
                .await?;
            let Some(row) = rows.first() else {
                return Ok(Attempt::Held {
                    remaining: None,
                    wakeup: None,
                });
            };
            let read = |e: tokio_postgres::Error| Error::store("acquire", request.key, e);
            let acquired: bool = row.try_get(0).map_err(read)?;
            if acquired {
                let fence: Option<i64> = row.try_get(1).map_err(read)?;
                return Ok(Attempt::Acquired {
                    fence: fence.map(i64::unsigned_abs),
                });
            }
            let remaining: i64 = row.try_get(2).map_err(read)?;
            Ok(Attempt::Held {
                remaining: Some(Duration::from_micros(remaining.max(0).unsigned_abs())),
                wakeup: interest.map(Wakeup::new),
            })
        })
    }

    fn release<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.free("release", key, Some(token)))
    }

    fn extend<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let stored = names::stored(key);
            let rows = self
                .query(
                    "extend",
                    key,
                    &self.shared.statements.extend,
                    &[
                        (&&*stored, Type::TEXT),
                        (&token, Type::TEXT),
                        (&micros(ttl), Type::INT8),
                    ],
                )
                .await?;
            Ok(!rows.is_empty())
        })
    }

    fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.free("force-release", key, None))
    }

    fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Holder>>> {
        Box::pin(async move {
            let stored = names::stored(key);
            let rows = self
                .query(
                    "read the holder of",
                    key,
                    &self.shared.statements.holder,
                    &[(&&*stored, Type::TEXT)],
                )
                .await?;
            let Some(row) = rows.first() else {
                return Ok(None);
            };
            let read = |e: tokio_postgres::Error| Error::store("read the holder of", key, e);
            let token: String = row.try_get(0).map_err(read)?;
            let remaining: i64 = row.try_get(1).map_err(read)?;
            Ok(Some(Holder::new(
                token,
                Duration::from_micros(remaining.max(0).unsigned_abs()),
            )))
        })
    }

    /// One `SELECT`: a consistent snapshot of the lease table. A name kept
    /// as a hash (one with a NUL byte, or over 2 KB) is listed as its row
    /// name: its first bytes, then `\u{1}sha256:` and the hash.
    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<(String, Holder)>>> {
        Box::pin(async move {
            let operation = "list the locks under";
            let rows = self
                .query(
                    operation,
                    prefix,
                    &self.shared.statements.list,
                    &[(&names::list_prefix(prefix), Type::TEXT)],
                )
                .await?;
            let read = |e: tokio_postgres::Error| Error::store(operation, prefix, e);
            let mut listed = Vec::with_capacity(rows.len());
            for row in &rows {
                let name: String = row.try_get(0).map_err(read)?;
                if !names::listed(&name, prefix) {
                    continue;
                }
                let token: String = row.try_get(1).map_err(read)?;
                let remaining: i64 = row.try_get(2).map_err(read)?;
                let remaining = Duration::from_micros(remaining.max(0).unsigned_abs());
                listed.push((name, Holder::new(token, remaining)));
            }
            Ok(listed)
        })
    }

    fn name(&self) -> &'static str {
        "postgres"
    }

    fn is_shared(&self) -> bool {
        true
    }

    /// 100 years, far inside what `timestamptz` arithmetic can represent.
    fn max_ttl(&self) -> Duration {
        kit::MAX_TTL
    }

    fn fencing(&self) -> bool {
        true
    }
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("database", &self.shared.shown)
            .field("table", &self.shared.config.table)
            .field("timeout", &self.shared.config.timeout)
            .field("waited_keys", &self.shared.waiters.len())
            .finish_non_exhaustive()
    }
}
