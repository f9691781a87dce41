//! Leases in PostgreSQL: the database most applications already run.
//!
//! One job per file: [`config`] (the settings), [`link`] (where and how
//! to connect: the connection string, read by [`conninfo`], with libpq's
//! [`environment`] and [`tls`]), [`connect`] (the pool, the
//! tables found or created, the background tasks started), [`sql`] (the
//! table and the one statement behind each operation), [`listen`] (the
//! `LISTEN` connection that wakes waiters), [`sweep`] (deleting rows their
//! holders left behind), [`checkout`] (a pooled connection that never goes
//! back busy), [`names`] (the row name of any lock name), [`read`] (a
//! reader's acquire, and why readers live in their name's row), [`intent`]
//! (a waiting writer's intent, taken back when it stops waiting); this
//! file is the store and its operations.

mod checkout;
mod config;
mod connect;
mod conninfo;
mod environment;
mod intent;
mod link;
mod listen;
mod names;
mod read;
mod sql;
mod sweep;
mod tls;
pub(crate) mod url;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio_postgres::types::{ToSql, Type};

use self::checkout::{Checkout, call_deadline};
pub use self::config::PostgresConfig;
use self::sql::Statements;
use crate::store::kit::{self, Background, BoxError, Interest, Waiters};
use crate::store::{AcquireRequest, Attempt, BoxFuture, LockStore, Wakeup};
use crate::{Error, Holder, Result};

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
/// | acquire | `INSERT ... ON CONFLICT (name) DO UPDATE ... WHERE expires_at <= now` and no reader lives (returning the fence, or the holder's remaining TTL for a waiting caller) |
/// | a reader's acquire | `INSERT ... ON CONFLICT (name) DO UPDATE` appending to the row's readers, where no writer's lease and no writer's intent lasts |
/// | release | delete the row where the writer's token is ours, or take a reader's token out of the row, and `NOTIFY` if someone waits and the name is free for them |
/// | extend | `UPDATE ... SET expires_at = now + ttl WHERE token = ours AND expires_at > now`, or the same on one reader's expiry |
/// | holder | one `SELECT`: the writer, or else the reader whose lease ends first |
/// | list | one `SELECT ... WHERE starts_with(name, prefix)`: a consistent snapshot, one entry per writer and per reader |
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
/// # TLS
///
/// With the `postgres-tls` feature, the URL's `sslmode` and certificates
/// (or libpq's environment variables, below) say whether and how, by
/// libpq's rules:
///
/// | `sslmode` | without a CA | with a CA (`sslrootcert=PATH`) |
/// |---|---|---|
/// | not given | plain, unless a client certificate is given (then as `require`) | TLS, the chain checked |
/// | `disable` | plain | refused: a CA asks for TLS |
/// | `prefer` | TLS if the server offers it, the certificate unchecked; **plain text if it answers that it has no TLS** | the same, the chain checked when TLS is used: **plain text if the server answers that it has none** |
/// | `require` | TLS, the certificate unchecked | TLS, the chain checked |
/// | `verify-ca` | refused: nothing to check against | TLS, the chain checked |
/// | `verify-full` | refused, unless `sslrootcert=system` (the public CAs) | TLS, the chain and the host name checked |
///
/// **`prefer` protects nothing against an attacker, CA or not**: as in
/// libpq, when the server (or anyone between, who needs no certificate to
/// do it) answers the request for TLS with "no", the connection goes on in
/// plain text, password and leases included. A CA with `prefer` checks the
/// certificate of a server that does answer in TLS; it does not make TLS
/// happen. Ask for `require`, or `verify-full` to also know whom you talk
/// to.
///
/// Two choices differ from libpq, both to fail closed: without `sslmode`
/// and certificates a connection is plain (libpq tries TLS and takes any
/// certificate, no safer against an attacker), so enabling the feature
/// changes how no existing URL connects; and a certificate check that
/// fails is an error, never a fall back to plain (the fall back above is
/// `prefer`'s, when the server offers no TLS at all).
/// `sslcert=PATH&sslkey=PATH` is a client certificate, for `cert`
/// authentication or `clientcert=` in `pg_hba.conf`. The certificates can
/// also come from [`PostgresConfig::tls`] or
/// [`ConnectOptions::tls`](crate::ConnectOptions::tls); the URL's words
/// win.
///
/// What the URL (or `key=value` string) does not say comes from libpq's
/// environment variables, as libpq reads them (tokio-postgres reads none):
/// `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`,
/// `PGSSLNEGOTIATION`, and `PGHOST`, `PGHOSTADDR`, `PGPORT`,
/// `PGDATABASE`, `PGUSER`, `PGPASSWORD`, `PGOPTIONS`, `PGAPPNAME`,
/// `PGCONNECT_TIMEOUT`, `PGTARGETSESSIONATTRS`, `PGCHANNELBINDING`,
/// `PGLOADBALANCEHOSTS`. Each stands for its setting only where the URL
/// leaves that setting out: the URL wins, and a certificate of
/// [`PostgresConfig::tls`] wins over the variables' (with `sslmode=disable`
/// their certificates are left unused, as libpq leaves them). So a
/// deployment that sets `PGSSLMODE=verify-full` and `PGSSLROOTCERT` gets
/// TLS, or a refusal saying why. An empty variable counts as unset; a
/// refusal names the variables that had a part. Not read: `PGSERVICE`,
/// `PGPASSFILE` (`~/.pgpass`), `PGSSLCRL`, `PGSSLCRLDIR`, `PGREQUIRESSL`,
/// `PGGSSENCMODE`, and libpq's default files (`~/.postgresql/root.crt`,
/// `postgresql.crt`, `postgresql.key`).
///
/// ```no_run
/// # #[tokio::main] async fn main() -> lock_core::Result<()> {
/// use lock_core::PostgresStore;
///
/// let store = PostgresStore::connect(
///     "postgres://app@db.internal/app?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem",
/// )
/// .await?;
/// # let _ = store;
/// # Ok(()) }
/// ```
///
/// Every connection the store opens goes the same way: the pool's, the
/// `LISTEN` connection's and the cancel requests' (with
/// [`from_pool`](PostgresStore::from_pool), the latter two, from the
/// listen URL). A connect that fails for a certificate says so and names
/// the setting to change. Without the feature, connections are plain, and
/// `require`, `verify-*` or a certificate are refused at connect.
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
///     waited_until  timestamptz,           -- someone waits: NOTIFY on release
///     reader_tokens       text[],          -- the readers: a token and
///     reader_expiries     timestamptz[],   -- an expiry each
///     writer_waits_until  timestamptz      -- a writer waits: no new reader
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
/// Connecting adds the read side's three columns to a lease table an
/// earlier version made (nullable, no default: no row is rewritten), only
/// when one is missing. With `create_table(false)` the table comes from
/// your migrations and connecting fails, naming them, when they lack one.
/// Until every process sharing the table runs this version, keep to plain
/// locks: an earlier version's acquire does not see readers, and its sweep
/// may delete a row that holds only readers.
///
/// # The read side
///
/// [`read_mode`](LockStore::read_mode) is true: readers
/// ([`Lock::read`](crate::Lock::read)) live in their name's row, one token
/// and one expiry each, so every decision about a name is taken in one
/// statement on that row, locked and read as it was last committed (a
/// reader that got in a moment earlier is always seen). Each reader
/// expires on its own, by its expiry; release and extend take a reader's
/// token and touch only its entry; a force-release deletes the writer and
/// every reader.
///
/// Writer preference: a writer that waits while readers hold the name
/// marks the row (`writer_waits_until`, two seconds from its attempt), and
/// no new reader gets in while the mark lasts (behind another writer it
/// makes no mark, as on Redis and etcd: see `Lock::read`). Held off by readers, it tries again at
/// least every second, renewing the mark, and it is woken at once when the
/// last reader releases (that release `NOTIFY`s); the writer that takes the
/// name clears the mark, and one that stops waiting without it takes its
/// mark back and wakes the readers (`NOTIFY`). A writer that died holds
/// readers off two seconds after its last attempt, no longer. A writer's
/// release wakes the readers waiting for it. A reader's release leaves the
/// row (empty once the last reader is gone) to the sweep.
///
/// # Any name
///
/// A PostgreSQL `text` cannot hold a NUL byte, and a primary-key entry
/// cannot exceed about 2.7 KB, so a name whose store key (the prefix and
/// the name) holds a NUL byte, is over 2,600 bytes, or holds
/// `\u{1}sha256:` is kept under its first bytes (up to the NUL, at most
/// 1 KB) followed by `\u{1}sha256:` and the SHA-256 of the whole key.
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
/// # Calls cut off
///
/// Every call, the wait for a pooled connection included, is bounded by
/// [`PostgresConfig::timeout`] (3 s by default). A call cut off at that
/// deadline asks the server to cancel its statement and closes its
/// connection, which never goes back to the pool busy; a call its caller
/// drops sooner keeps its connection out of the pool until the server has
/// answered, then returns it. `Debug` shows `user@host:port/db`, never the
/// password.
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
    /// How a cancel request connects: as the store's connections do.
    connector: tls::Connector,
    /// How it opens itself again ([`LockStore::reopen`]).
    reopen: Option<kit::Reopen>,
    /// The `LISTEN` connection and the sweep: kept only to be dropped,
    /// which aborts them with the store.
    _tasks: Background,
}

impl PostgresStore {
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
                &self.shared.connector,
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
        let payload = names::payload_of(key);
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
        // This process's own waiters need not wait for the NOTIFY, when
        // there is one: a reader's release that leaves other readers in
        // frees nothing a waiter could take, and waking one then (a writer,
        // say) would only send it to the back of the line.
        let freed = rows
            .iter()
            .any(|row| row.try_get::<_, bool>(1).unwrap_or(true));
        if freed {
            self.shared.waiters.released(key);
        }
        Ok(released)
    }
}

/// The holder in a row of the `holder` or `list` statement: `(name, token,
/// remaining microseconds, reader)`.
fn held(row: &tokio_postgres::Row) -> std::result::Result<Holder, tokio_postgres::Error> {
    let token: String = row.try_get(1)?;
    let remaining: i64 = row.try_get(2)?;
    let holder = Holder::new(token, Duration::from_micros(remaining.max(0).unsigned_abs()));
    let fence: Option<i64> = row.try_get(4)?;
    Ok(match (row.try_get(3)?, fence) {
        (true, _) => holder.as_reader(),
        (false, Some(fence)) => holder.with_fence(fence.unsigned_abs()),
        (false, None) => holder,
    })
}

/// Microseconds of `ttl`, for the statements.
fn micros(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX)
}

impl LockStore for PostgresStore {
    fn acquire<'a>(&'a self, request: AcquireRequest<'a>) -> BoxFuture<'a, Result<Attempt>> {
        Box::pin(async move {
            kit::check_lease(request.key, request.ttl, self)?;
            // Before the statement: a release that lands between it and the
            // sleep must still wake us.
            let interest = request
                .wake
                .then(|| self.shared.waiters.register_for(request.key, request.read));
            let holder = kit::owner_of(request.token);
            let stored = names::stored(request.key);
            let fenced = request.fenced && !request.read;
            // An election's new leader is announced to observers: `+` and
            // the name (see `payload_of` for names that cannot be sent).
            // No channel, no announcement: other fenced leases.
            let announced = format!("+{}", names::payload_of(request.key));
            let channel = request
                .announce
                .then_some(self.shared.config.channel.as_str());
            let params: [(&(dyn ToSql + Sync), Type); 6] = [
                (&&*stored, Type::TEXT),
                (&request.token, Type::TEXT),
                (&holder, Type::TEXT),
                (&micros(request.ttl), Type::INT8),
                (&channel, Type::TEXT),
                (&announced, Type::TEXT),
            ];
            let rows = self
                .query(
                    "acquire",
                    request.key,
                    if request.read {
                        &self.shared.statements.read[usize::from(request.wake)]
                    } else {
                        &self.shared.statements.acquire[usize::from(request.fenced)]
                            [usize::from(request.wake)]
                    },
                    // Only the fenced statement announces.
                    if fenced { &params } else { &params[..4] },
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
                // Readers waiting here pass the wake on (see
                // `reader_admitted`).
                if request.read {
                    drop(interest);
                    self.shared.waiters.reader_admitted(request.key);
                }
                let fence: Option<i64> = row.try_get(1).map_err(read)?;
                return Ok(Attempt::Acquired {
                    fence: fence.map(i64::unsigned_abs),
                });
            }
            let remaining: i64 = row.try_get(2).map_err(read)?;
            let wakeup = match interest {
                Some(interest) if !request.read => {
                    let intent = row.try_get(3).map_err(read)?;
                    Some(self.writer_wakeup(interest, request.key, intent))
                }
                interest => interest.map(Interest::into_wakeup),
            };
            Ok(Attempt::Held {
                remaining: Some(Duration::from_micros(remaining.max(0).unsigned_abs())),
                wakeup,
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
            kit::check_lease(key, ttl, self)?;
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
            held(row).map(Some).map_err(read)
        })
    }

    /// One `SELECT` of the name's row, by its primary key.
    fn is_held_by<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let stored = names::stored(key);
            let rows = self
                .query(
                    "check the holder of",
                    key,
                    &self.shared.statements.held_by,
                    &[(&&*stored, Type::TEXT), (&token, Type::TEXT)],
                )
                .await?;
            Ok(!rows.is_empty())
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
                listed.push((name, held(row).map_err(read)?));
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

    /// Readers live in their name's row: see the module's docs.
    fn read_mode(&self) -> bool {
        true
    }

    /// On the `LISTEN` connection, which hears every release of a fenced
    /// name and every new holder of one.
    fn observe(&self, key: &str) -> Option<Wakeup> {
        Some(Wakeup::observer(self.shared.waiters.observe(key)))
    }

    fn reopen(&self) -> Option<BoxFuture<'static, Result<Arc<dyn LockStore>>>> {
        self.shared.reopen.as_ref().map(kit::Reopen::open)
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
